// Mixing weights: how much of each neighbour's value a node takes per gossip round.
//
// Dense matrices are row-major n x n vectors, w[i * n + j].
//  - Metropolis-Hastings (undirected graphs): x_i <- sum_j W_ij x_j with
//    W_ij = 1 / (1 + max(d_i, d_j)) on edges and W_ii = 1 - sum_{j != i} W_ij.
//    W is symmetric and doubly stochastic, so plain averaging converges to the mean.
//  - Push-sum (directed or time-varying graphs, Kempe et al. 2003; SGP): at round t
//    node i keeps and sends the share 1 / (1 + outdeg_t(i)) of its mass to itself and
//    to each out-neighbour: A_ji = that share. A is column stochastic (mass is
//    conserved, not the average), so push-sum also mixes the weights and divides.
// Pure and std only; the gossip/ layer applies these weights to real buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "topologies/graph.h"

namespace chorus::topologies {

struct PeerWeight {
  int peer = 0;         // a rank; equal to the node itself for the self weight
  double weight = 0.0;  // in (0, 1]
};

// Fails (FailedPrecondition, naming the graph) when the graph is not undirected.
Result<std::vector<double>> MetropolisHastingsMatrix(const Graph& graph);

// Row `node` of the Metropolis-Hastings matrix: the node itself and each neighbour,
// sorted by peer. Fails on a directed graph or a node outside [0, n).
Result<std::vector<PeerWeight>> MetropolisHastingsWeights(const Graph& graph, int node);

// The column-stochastic push-sum matrix of round t: column i spreads node i's mass.
std::vector<double> PushSumMatrix(const Graph& graph, int64_t round);

// The shares node `node` sends at round t (itself included), sorted by peer; they sum
// to 1. Fails on a node outside [0, n).
Result<std::vector<PeerWeight>> PushSumWeights(const Graph& graph, int node, int64_t round);

// Metropolis-Hastings when the graph is undirected, otherwise push-sum for round t.
std::vector<double> DefaultMixingMatrix(const Graph& graph, int64_t round);

}  // namespace chorus::topologies
