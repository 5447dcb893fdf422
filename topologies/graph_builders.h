// Graph builders: the named topologies over ranks 0..n-1.
//
// Each builder checks that its shape fits n and returns InvalidArgument naming the
// shape and n otherwise ("torus 3x3 has 9 nodes but the cluster has 8"). All are
// deterministic: every node that builds the same graph from the same arguments gets
// the same edges (the random-regular builder uses its own fixed generator, not
// <random>'s implementation-defined distributions). Pure and std only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "topologies/graph.h"

namespace chorus::topologies {

// Directed ring: i -> (i + 1) mod n. n = 1 has no edges; n = 2 is one undirected edge.
Result<Graph> RingGraph(int n);

// Undirected ring: i <-> (i +- 1) mod n. Degree 2 for n >= 3, 1 for n = 2, 0 for n = 1.
Result<Graph> BidirectionalRingGraph(int n);

// Undirected k-D torus with wrap-around: node i has coordinates (row-major, last
// dimension fastest) and neighbours +-1 along each dimension. A dimension of size 2
// contributes one neighbour, of size 1 none. Needs dims non-empty, each >= 1 and
// their product == n.
Result<Graph> TorusGraph(int n, const std::vector<int>& dims);

// Undirected hypercube: i <-> i xor 2^k. n must be a power of two (1 included).
Result<Graph> HypercubeGraph(int n);

// Static exponential graph (SGP, Assran et al. 2019): directed edges
// i -> (i + 2^k) mod n for k = 0 .. floor(log2(n - 1)), i.e. every power of two below n.
Result<Graph> ExponentialGraph(int n);

// One-peer exponential graph (SGP): time-varying, at round t node i sends only to
// (i + 2^(t mod m)) mod n where 2^0 .. 2^(m-1) are the powers of two below n.
// Period m (1 for n <= 2). For n a power of two, the push-sum product over one
// period is exactly the averaging matrix.
Result<Graph> OnePeerExponentialGraph(int n);

// Undirected simple d-regular graph built from `seed` by a pairing model: stubs are
// paired one at a time, each time choosing a partner stub uniformly among those that
// make neither a self-loop nor a repeated edge (Steger and Wormald 1999); a dead end
// restarts the attempt. For d > (n-1)/2 the complement of an (n-1-d)-regular graph is
// built instead. The result is also required to be connected (retrying with derived
// seeds). Needs 0 <= d < n, n*d even, and a connected result possible (d >= 2, or
// d = 1 with n = 2, or n = 1). The distribution is close to, not exactly, uniform.
Result<Graph> RandomRegularGraph(int n, int degree, uint64_t seed);

// Every pair connected.
Result<Graph> CompleteGraph(int n);

// `graph` with its positions given to ranks: the node at position p is rank
// rank_at[p] (a permutation of 0..n-1), every edge and round kept. The same
// graph up to names: degrees, connectivity and the spectrum (so the
// spectral gap) do not change. With LinkAwareOrder (host_groups.h) the short
// edges of a ring or an exponential graph fall inside sites and few cross
// them. Errors: a list that is not a permutation of the graph's nodes.
Result<Graph> PlaceGraph(const Graph& graph, const std::vector<int>& rank_at, const std::string& how);

}  // namespace chorus::topologies
