// Graph: validation of edge lists and the derived in-neighbours. See graph.h.
#include "topologies/graph.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace chorus::topologies {

Result<Graph> Graph::Create(std::string name, int num_nodes,
                            std::vector<std::vector<std::vector<int>>> out_by_round) {
  if (num_nodes < 1) {
    return Err(InvalidArgument("graph " + name + ": needs at least 1 node, got " +
                               std::to_string(num_nodes)));
  }
  if (out_by_round.empty()) {
    return Err(InvalidArgument("graph " + name + ": needs at least one round"));
  }
  Graph graph;
  graph.name_ = std::move(name);
  graph.num_nodes_ = num_nodes;
  graph.in_.assign(out_by_round.size(), std::vector<std::vector<int>>(num_nodes));
  for (size_t t = 0; t < out_by_round.size(); ++t) {
    auto& round = out_by_round[t];
    if (static_cast<int>(round.size()) != num_nodes) {
      return Err(InvalidArgument("graph " + graph.name_ + ": round " + std::to_string(t) +
                                 " lists " + std::to_string(round.size()) +
                                 " nodes but the graph has " + std::to_string(num_nodes)));
    }
    for (int i = 0; i < num_nodes; ++i) {
      auto& out = round[i];
      std::sort(out.begin(), out.end());
      for (size_t k = 0; k < out.size(); ++k) {
        const int j = out[k];
        const std::string where = "graph " + graph.name_ + ": round " + std::to_string(t) +
                                  ", node " + std::to_string(i) + ": ";
        if (j < 0 || j >= num_nodes) {
          return Err(InvalidArgument(where + "neighbour " + std::to_string(j) +
                                     " is outside [0, " + std::to_string(num_nodes) + ")"));
        }
        if (j == i) return Err(InvalidArgument(where + "self-loop"));
        if (k > 0 && out[k - 1] == j) {
          return Err(InvalidArgument(where + "duplicate edge to " + std::to_string(j)));
        }
        graph.in_[t][j].push_back(i);  // i ascends, so in-lists come out sorted
      }
    }
  }
  graph.out_ = std::move(out_by_round);

  graph.undirected_ = graph.out_.size() == 1;
  for (int i = 0; i < num_nodes && graph.undirected_; ++i) {
    graph.undirected_ = graph.out_[0][i] == graph.in_[0][i];
  }
  return graph;
}

bool Graph::HasEdge(int from, int to, int64_t round) const {
  const auto& out = OutNeighbors(from, round);
  return std::binary_search(out.begin(), out.end(), to);
}

int64_t Graph::NumDirectedEdges(int64_t round) const {
  int64_t total = 0;
  for (int i = 0; i < num_nodes_; ++i) total += OutDegree(i, round);
  return total;
}

bool Graph::IsConnected() const {
  std::vector<char> seen(num_nodes_, 0);
  std::vector<int> stack = {0};
  seen[0] = 1;
  int reached = 1;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    for (size_t t = 0; t < out_.size(); ++t) {
      for (const auto* list : {&out_[t][i], &in_[t][i]}) {
        for (int j : *list) {
          if (!seen[j]) {
            seen[j] = 1;
            ++reached;
            stack.push_back(j);
          }
        }
      }
    }
  }
  return reached == num_nodes_;
}

}  // namespace chorus::topologies
