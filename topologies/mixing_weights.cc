// Mixing weights: Metropolis-Hastings and push-sum matrices. See mixing_weights.h.
#include "topologies/mixing_weights.h"

#include <algorithm>
#include <string>
#include <vector>

namespace chorus::topologies {
namespace {

Status CheckNode(const Graph& graph, int node) {
  if (node < 0 || node >= graph.NumNodes()) {
    return OutOfRange("graph " + graph.Name() + ": node " + std::to_string(node) +
                      " is outside [0, " + std::to_string(graph.NumNodes()) + ")");
  }
  return Status::Ok();
}

Status CheckUndirected(const Graph& graph) {
  if (!graph.IsUndirected()) {
    return FailedPrecondition("graph " + graph.Name() +
                              " is directed or time-varying; Metropolis-Hastings weights need an "
                              "undirected graph (use push-sum weights)");
  }
  return Status::Ok();
}

// Row `node` of MH without the checks.
std::vector<PeerWeight> MetropolisHastingsRow(const Graph& graph, int node) {
  std::vector<PeerWeight> row;
  const int degree = graph.OutDegree(node);
  double off_diagonal = 0.0;
  for (int j : graph.OutNeighbors(node)) {
    const double w = 1.0 / (1.0 + std::max(degree, graph.OutDegree(j)));
    row.push_back({j, w});
    off_diagonal += w;
  }
  row.push_back({node, 1.0 - off_diagonal});
  std::sort(row.begin(), row.end(),
            [](const PeerWeight& a, const PeerWeight& b) { return a.peer < b.peer; });
  return row;
}

std::vector<PeerWeight> PushSumRow(const Graph& graph, int node, int64_t round) {
  const auto& out = graph.OutNeighbors(node, round);
  const double share = 1.0 / (1.0 + static_cast<double>(out.size()));
  std::vector<PeerWeight> row;
  row.reserve(out.size() + 1);
  bool self_added = false;
  for (int j : out) {
    if (!self_added && node < j) {
      row.push_back({node, share});
      self_added = true;
    }
    row.push_back({j, share});
  }
  if (!self_added) row.push_back({node, share});
  return row;
}

}  // namespace

Result<std::vector<double>> MetropolisHastingsMatrix(const Graph& graph) {
  CHORUS_RETURN_IF_ERROR(CheckUndirected(graph));
  const int n = graph.NumNodes();
  std::vector<double> w(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (const PeerWeight& pw : MetropolisHastingsRow(graph, i)) {
      w[static_cast<size_t>(i) * n + pw.peer] = pw.weight;
    }
  }
  return w;
}

Result<std::vector<PeerWeight>> MetropolisHastingsWeights(const Graph& graph, int node) {
  CHORUS_RETURN_IF_ERROR(CheckUndirected(graph));
  CHORUS_RETURN_IF_ERROR(CheckNode(graph, node));
  return MetropolisHastingsRow(graph, node);
}

std::vector<double> PushSumMatrix(const Graph& graph, int64_t round) {
  const int n = graph.NumNodes();
  std::vector<double> a(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (const PeerWeight& pw : PushSumRow(graph, i, round)) {
      a[static_cast<size_t>(pw.peer) * n + i] = pw.weight;  // column i: where i's mass goes
    }
  }
  return a;
}

Result<std::vector<PeerWeight>> PushSumWeights(const Graph& graph, int node, int64_t round) {
  CHORUS_RETURN_IF_ERROR(CheckNode(graph, node));
  return PushSumRow(graph, node, round);
}

std::vector<double> DefaultMixingMatrix(const Graph& graph, int64_t round) {
  if (graph.IsUndirected()) return *MetropolisHastingsMatrix(graph);
  return PushSumMatrix(graph, round);
}

}  // namespace chorus::topologies
