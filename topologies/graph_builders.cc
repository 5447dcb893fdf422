// Graph builders: ring, bidirectional ring, torus, hypercube, exponential,
// one-peer exponential, random regular, complete. See graph_builders.h.
#include "topologies/graph_builders.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/split_mix64.h"

namespace chorus::topologies {
namespace {

using Adjacency = std::vector<std::vector<int>>;  // [node] -> out-neighbours

Status CheckNodeCount(const std::string& kind, int n) {
  if (n < 1) {
    return InvalidArgument(kind + ": the cluster has " + std::to_string(n) +
                           " nodes; need at least 1");
  }
  return Status::Ok();
}

// Adds i -> j for each offset in `offsets` (mod n), skipping self-loops and repeats.
Adjacency CirculantAdjacency(int n, const std::vector<int>& offsets) {
  Adjacency out(n);
  for (int i = 0; i < n; ++i) {
    std::set<int> targets;
    for (int offset : offsets) {
      const int j = static_cast<int>(((static_cast<int64_t>(i) + offset) % n + n) % n);
      if (j != i) targets.insert(j);
    }
    out[i].assign(targets.begin(), targets.end());
  }
  return out;
}

// Powers of two strictly below n: 1, 2, 4, ... (empty for n <= 1).
std::vector<int> PowersOfTwoBelow(int n) {
  std::vector<int> powers;
  for (int64_t p = 1; p < n; p *= 2) powers.push_back(static_cast<int>(p));
  return powers;
}

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

std::string JoinDims(const std::vector<int>& dims) {
  std::string text;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k > 0) text += "x";
    text += std::to_string(dims[k]);
  }
  return text;
}

// One attempt of the sequential pairing model for a d-regular simple graph on n
// nodes. `remaining[v]` counts v's unpaired stubs; each step draws a stub uniformly
// (node u), then a partner stub uniformly among the stubs of nodes v != u not yet
// adjacent to u. Returns false at a dead end (no suitable partner left).
bool TryPairing(int n, int degree, SplitMix64& rng, std::vector<char>& adjacent) {
  adjacent.assign(static_cast<size_t>(n) * n, 0);
  std::vector<int64_t> remaining(n, degree);
  int64_t total = static_cast<int64_t>(n) * degree;
  while (total > 0) {
    int64_t pick = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(total)));
    int u = 0;
    while (pick >= remaining[u]) pick -= remaining[u++];

    int64_t weight = 0;
    for (int v = 0; v < n; ++v) {
      if (v != u && !adjacent[static_cast<size_t>(u) * n + v]) weight += remaining[v];
    }
    if (weight == 0) return false;
    pick = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(weight)));
    int v = 0;
    for (;; ++v) {
      if (v == u || adjacent[static_cast<size_t>(u) * n + v]) continue;
      if (pick < remaining[v]) break;
      pick -= remaining[v];
    }
    adjacent[static_cast<size_t>(u) * n + v] = 1;
    adjacent[static_cast<size_t>(v) * n + u] = 1;
    --remaining[u];
    --remaining[v];
    total -= 2;
  }
  return true;
}

}  // namespace

Result<Graph> RingGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("ring", n));
  return Graph::Create("ring(" + std::to_string(n) + ")", n, {CirculantAdjacency(n, {1})});
}

Result<Graph> BidirectionalRingGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("bidirectional-ring", n));
  return Graph::Create("bidirectional-ring(" + std::to_string(n) + ")", n,
                       {CirculantAdjacency(n, {1, -1})});
}

Result<Graph> TorusGraph(int n, const std::vector<int>& dims) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("torus", n));
  if (dims.empty()) {
    return Err(InvalidArgument("torus: needs dims (e.g. [2, 4] for 8 nodes); got none"));
  }
  int64_t product = 1;
  bool overflow = false;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 1) {
      return Err(InvalidArgument("torus " + JoinDims(dims) + ": dimension " +
                                 std::to_string(k) + " is " + std::to_string(dims[k]) +
                                 "; each must be >= 1"));
    }
    if (product > std::numeric_limits<int64_t>::max() / dims[k]) overflow = true;
    if (!overflow) product *= dims[k];
  }
  if (overflow || product != n) {
    return Err(InvalidArgument("torus " + JoinDims(dims) + " has " +
                               (overflow ? "over 2^63" : std::to_string(product)) +
                               " nodes but the cluster has " + std::to_string(n)));
  }
  // stride[k]: distance in rank between neighbours along dimension k (row-major).
  std::vector<int> stride(dims.size(), 1);
  for (int k = static_cast<int>(dims.size()) - 2; k >= 0; --k) stride[k] = stride[k + 1] * dims[k + 1];
  Adjacency out(n);
  for (int i = 0; i < n; ++i) {
    std::set<int> targets;
    for (size_t k = 0; k < dims.size(); ++k) {
      const int coord = (i / stride[k]) % dims[k];
      for (int step : {1, -1}) {
        const int moved = ((coord + step) % dims[k] + dims[k]) % dims[k];
        const int j = i + (moved - coord) * stride[k];
        if (j != i) targets.insert(j);
      }
    }
    out[i].assign(targets.begin(), targets.end());
  }
  return Graph::Create("torus " + JoinDims(dims), n, {std::move(out)});
}

Result<Graph> HypercubeGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("hypercube", n));
  if (!IsPowerOfTwo(n)) {
    return Err(InvalidArgument("hypercube needs a power-of-two node count but the cluster has " +
                               std::to_string(n)));
  }
  Adjacency out(n);
  for (int i = 0; i < n; ++i) {
    for (int bit = 1; bit < n; bit *= 2) out[i].push_back(i ^ bit);
  }
  return Graph::Create("hypercube(" + std::to_string(n) + ")", n, {std::move(out)});
}

Result<Graph> ExponentialGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("exponential", n));
  return Graph::Create("exponential(" + std::to_string(n) + ")", n,
                       {CirculantAdjacency(n, PowersOfTwoBelow(n))});
}

Result<Graph> OnePeerExponentialGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("one-peer-exponential", n));
  std::vector<int> powers = PowersOfTwoBelow(n);
  if (powers.empty()) powers.push_back(0);  // n = 1: one round without edges
  std::vector<Adjacency> rounds;
  for (int power : powers) rounds.push_back(CirculantAdjacency(n, {power}));
  return Graph::Create("one-peer-exponential(" + std::to_string(n) + ")", n, std::move(rounds));
}

Result<Graph> RandomRegularGraph(int n, int degree, uint64_t seed) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("random-regular", n));
  const std::string name = "random-regular(n=" + std::to_string(n) + ", d=" +
                           std::to_string(degree) + ", seed=" + std::to_string(seed) + ")";
  if (degree < 0 || degree >= n) {
    return Err(InvalidArgument(name + ": degree must be in [0, " + std::to_string(n) +
                               ") for " + std::to_string(n) + " nodes"));
  }
  if ((static_cast<int64_t>(n) * degree) % 2 != 0) {
    return Err(InvalidArgument(name + ": n*d = " + std::to_string(int64_t{n} * degree) +
                               " is odd; a d-regular graph needs n*d even"));
  }
  if (n > 1 && (degree == 0 || (degree == 1 && n > 2))) {
    return Err(InvalidArgument(name + ": a " + std::to_string(degree) +
                               "-regular graph on " + std::to_string(n) +
                               " nodes cannot be connected; use degree >= 2"));
  }
  // Dense requests: pair the sparser complement, then invert it.
  const bool complement = degree > (n - 1) / 2;
  const int sparse_degree = complement ? n - 1 - degree : degree;
  constexpr int kMaxAttempts = 1000;
  std::vector<char> adjacent;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    SplitMix64 rng(seed ^ (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(attempt + 1)));
    if (!TryPairing(n, sparse_degree, rng, adjacent)) continue;
    Adjacency out(n);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (j != i && (adjacent[static_cast<size_t>(i) * n + j] != 0) != complement) {
          out[i].push_back(j);
        }
      }
    }
    CHORUS_ASSIGN_OR_RETURN(Graph graph, Graph::Create(name, n, {std::move(out)}));
    if (graph.IsConnected()) return graph;
  }
  return Err(InvalidArgument(name + ": no connected graph found in " +
                             std::to_string(kMaxAttempts) + " attempts; try another seed or degree"));
}

Result<Graph> CompleteGraph(int n) {
  CHORUS_RETURN_IF_ERROR(CheckNodeCount("complete", n));
  Adjacency out(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (j != i) out[i].push_back(j);
    }
  }
  return Graph::Create("complete(" + std::to_string(n) + ")", n, {std::move(out)});
}

Result<Graph> PlaceGraph(const Graph& graph, const std::vector<int>& rank_at, const std::string& how) {
  const int n = graph.NumNodes();
  std::vector<bool> seen(static_cast<size_t>(n), false);
  if (static_cast<int>(rank_at.size()) != n) {
    return Err(InvalidArgument("placing " + graph.Name() + ": " + std::to_string(rank_at.size()) + " ranks for " +
                               std::to_string(n) + " nodes"));
  }
  for (int r : rank_at) {
    if (r < 0 || r >= n || seen[static_cast<size_t>(r)]) {
      return Err(InvalidArgument("placing " + graph.Name() + ": rank " + std::to_string(r) +
                                 " is out of range or repeated"));
    }
    seen[static_cast<size_t>(r)] = true;
  }
  std::vector<Adjacency> rounds;
  for (int t = 0; t < graph.Period(); ++t) {
    Adjacency out(n);
    for (int p = 0; p < n; ++p) {
      for (int q : graph.OutNeighbors(p, t)) out[rank_at[p]].push_back(rank_at[q]);
    }
    rounds.push_back(std::move(out));
  }
  return Graph::Create(graph.Name() + " " + how, n, std::move(rounds));
}

}  // namespace chorus::topologies
