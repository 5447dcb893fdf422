// topologies/: pure graph code: graphs, mixing weights, spectral gap, collective schedules.
//
// Graph: who talks to whom among the ranks 0..n-1 of a cluster, per round.
//
// A Graph is a value: for each round of its period it stores every node's
// out-neighbours (sorted, no self-loops, no duplicates) and the derived
// in-neighbours. Static graphs have period 1 and ignore the round; time-varying
// graphs (one-peer exponential) repeat with their period. Ranks are positions in
// the membership list; mapping them to peers is node/'s job, not this file's.
// Pure and std only: no transport, no logging, no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::topologies {

class Graph {
 public:
  // out_by_round[t][i] lists the nodes that node i sends to at round t (0 <= t < period).
  // Lists may come unsorted; they are sorted here. Fails (InvalidArgument, naming
  // `name`, the round and the node) on n < 1, no rounds, a round with a size other
  // than n, a neighbour outside [0, n), a self-loop or a duplicate edge.
  static Result<Graph> Create(std::string name, int num_nodes,
                              std::vector<std::vector<std::vector<int>>> out_by_round);

  // A readable description, e.g. "ring(8)", "torus 2x4", "random-regular(d=3, seed=7, n=10)".
  const std::string& Name() const { return name_; }
  int NumNodes() const { return num_nodes_; }
  // Number of distinct rounds before the graph repeats; 1 for static graphs.
  int Period() const { return static_cast<int>(out_.size()); }
  bool IsTimeVarying() const { return Period() > 1; }
  // True when the graph is static and every edge i -> j has its reverse j -> i.
  // Computed from the edges, so a directed ring over 2 nodes counts as undirected.
  bool IsUndirected() const { return undirected_; }

  // Round t maps to t mod Period() (negative t too). `node` must be in [0, NumNodes()).
  const std::vector<int>& OutNeighbors(int node, int64_t round = 0) const {
    return out_[RoundIndex(round)][node];
  }
  const std::vector<int>& InNeighbors(int node, int64_t round = 0) const {
    return in_[RoundIndex(round)][node];
  }
  int OutDegree(int node, int64_t round = 0) const {
    return static_cast<int>(OutNeighbors(node, round).size());
  }
  int InDegree(int node, int64_t round = 0) const {
    return static_cast<int>(InNeighbors(node, round).size());
  }
  bool HasEdge(int from, int to, int64_t round = 0) const;
  // Directed edges at round t (an undirected edge counts twice).
  int64_t NumDirectedEdges(int64_t round = 0) const;

  // True when, ignoring direction and taking the union over all rounds of one
  // period, every node reaches every other. A single node is connected.
  bool IsConnected() const;

 private:
  Graph() = default;
  int RoundIndex(int64_t round) const {
    const int64_t period = static_cast<int64_t>(out_.size());
    return static_cast<int>(((round % period) + period) % period);
  }

  std::string name_;
  int num_nodes_ = 0;
  bool undirected_ = false;
  std::vector<std::vector<std::vector<int>>> out_;  // [round][node] -> sorted out-neighbours
  std::vector<std::vector<std::vector<int>>> in_;   // [round][node] -> sorted in-neighbours
};

}  // namespace chorus::topologies
