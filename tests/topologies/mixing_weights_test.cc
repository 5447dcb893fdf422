// Tests for mixing weights: Metropolis-Hastings is symmetric and doubly stochastic on
// every undirected graph, push-sum is column stochastic in every round, the per-node
// lists match the matrices, and known values come out.
#include "topologies/mixing_weights.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "topologies/graph_builders.h"
#include "topologies/topology_spec.h"

namespace chorus::topologies {
namespace {

// Sums of up to 16 terms each rounded to double: error below 16 * 2^-52 ~ 4e-15.
constexpr double kSumTolerance = 1e-13;

std::vector<Graph> AllGraphs() {
  std::vector<Graph> graphs;
  for (int n : {1, 2, 3, 5, 8, 12, 16}) {
    graphs.push_back(*RingGraph(n));
    graphs.push_back(*BidirectionalRingGraph(n));
    graphs.push_back(*ExponentialGraph(n));
    graphs.push_back(*OnePeerExponentialGraph(n));
    graphs.push_back(*CompleteGraph(n));
    if ((n & (n - 1)) == 0) graphs.push_back(*HypercubeGraph(n));
    if (n >= 3) graphs.push_back(*RandomRegularGraph(n, 2, 5));
  }
  graphs.push_back(*TorusGraph(12, {3, 4}));
  graphs.push_back(*TorusGraph(8, {2, 2, 2}));
  graphs.push_back(*RandomRegularGraph(12, 5, 3));
  // Irregular: a star plus one leaf-leaf edge, so degrees differ (3, 2, 2, 1).
  graphs.push_back(*Graph::Create("star+edge", 4, {{{1, 2, 3}, {0, 2}, {0, 1}, {0}}}));
  return graphs;
}

TEST(MixingWeights, MetropolisHastingsIsSymmetricDoublyStochastic) {
  int checked = 0;
  for (const Graph& g : AllGraphs()) {
    if (!g.IsUndirected()) continue;
    ++checked;
    const int n = g.NumNodes();
    auto w = MetropolisHastingsMatrix(g);
    ASSERT_TRUE(w) << w.error().ToString();
    for (int i = 0; i < n; ++i) {
      double row = 0.0, col = 0.0;
      for (int j = 0; j < n; ++j) {
        const double wij = (*w)[i * n + j];
        row += wij;
        col += (*w)[j * n + i];
        EXPECT_EQ(wij, (*w)[j * n + i]) << g.Name() << " (" << i << ", " << j << ")";
        EXPECT_GE(wij, 0.0);
        // Zero exactly off the edges.
        if (i != j && !g.HasEdge(i, j)) {
          EXPECT_EQ(wij, 0.0) << g.Name();
        }
      }
      EXPECT_NEAR(row, 1.0, kSumTolerance) << g.Name() << " row " << i;
      EXPECT_NEAR(col, 1.0, kSumTolerance) << g.Name() << " column " << i;
      auto list = MetropolisHastingsWeights(g, i);
      ASSERT_TRUE(list);
      ASSERT_EQ(static_cast<int>(list->size()), g.OutDegree(i) + 1);
      for (const PeerWeight& pw : *list) EXPECT_EQ(pw.weight, (*w)[i * n + pw.peer]);
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(MixingWeights, MetropolisHastingsKnownValues) {
  // Degree-2 ring: every weight 1/3.
  auto ring = MetropolisHastingsMatrix(*BidirectionalRingGraph(5));
  ASSERT_TRUE(ring);
  EXPECT_DOUBLE_EQ((*ring)[0 * 5 + 1], 1.0 / 3);
  EXPECT_DOUBLE_EQ((*ring)[0 * 5 + 4], 1.0 / 3);
  EXPECT_DOUBLE_EQ((*ring)[0 * 5 + 0], 1.0 / 3);
  // Star+edge: degrees 3, 2, 2, 1. Edge weights 1/(1 + max degree).
  auto g = Graph::Create("star+edge", 4, {{{1, 2, 3}, {0, 2}, {0, 1}, {0}}});
  auto w = MetropolisHastingsMatrix(*g);
  ASSERT_TRUE(w);
  EXPECT_DOUBLE_EQ((*w)[0 * 4 + 1], 1.0 / 4);
  EXPECT_DOUBLE_EQ((*w)[1 * 4 + 2], 1.0 / 3);
  EXPECT_DOUBLE_EQ((*w)[3 * 4 + 0], 1.0 / 4);
  EXPECT_DOUBLE_EQ((*w)[0 * 4 + 0], 1.0 - 3.0 / 4);
  EXPECT_DOUBLE_EQ((*w)[1 * 4 + 1], 1.0 - 1.0 / 4 - 1.0 / 3);
  EXPECT_DOUBLE_EQ((*w)[3 * 4 + 3], 3.0 / 4);
  // A single node keeps everything.
  EXPECT_EQ(*MetropolisHastingsMatrix(*CompleteGraph(1)), std::vector<double>{1.0});
}

TEST(MixingWeights, MetropolisHastingsRejectsDirectedGraphs) {
  auto w = MetropolisHastingsMatrix(*RingGraph(5));
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(w.error().message().find("ring(5)"), std::string::npos);
  EXPECT_FALSE(MetropolisHastingsWeights(*OnePeerExponentialGraph(8), 0));
  EXPECT_FALSE(MetropolisHastingsWeights(*CompleteGraph(3), 3));
}

TEST(MixingWeights, PushSumIsColumnStochasticEveryRound) {
  for (const Graph& g : AllGraphs()) {
    const int n = g.NumNodes();
    for (int t = 0; t < 2 * g.Period() + 1; ++t) {
      const std::vector<double> a = PushSumMatrix(g, t);
      for (int i = 0; i < n; ++i) {
        double column = 0.0;
        const double share = 1.0 / (1 + g.OutDegree(i, t));
        for (int j = 0; j < n; ++j) {
          const double aji = a[j * n + i];
          column += aji;
          const bool receives = j == i || g.HasEdge(i, j, t);
          EXPECT_EQ(aji, receives ? share : 0.0) << g.Name() << " round " << t;
        }
        EXPECT_NEAR(column, 1.0, kSumTolerance) << g.Name() << " round " << t << " column " << i;
        auto list = PushSumWeights(g, i, t);
        ASSERT_TRUE(list);
        ASSERT_EQ(static_cast<int>(list->size()), g.OutDegree(i, t) + 1);
        for (size_t k = 0; k < list->size(); ++k) {
          EXPECT_EQ((*list)[k].weight, a[(*list)[k].peer * n + i]);
          if (k > 0) {
            EXPECT_LT((*list)[k - 1].peer, (*list)[k].peer);
          }
        }
      }
    }
  }
  EXPECT_FALSE(PushSumWeights(*RingGraph(4), -1, 0));
}

TEST(MixingWeights, DefaultPicksByDirectedness) {
  auto ring = BidirectionalRingGraph(6);
  EXPECT_EQ(DefaultMixingMatrix(*ring, 0), *MetropolisHastingsMatrix(*ring));
  auto directed = ExponentialGraph(6);
  EXPECT_EQ(DefaultMixingMatrix(*directed, 3), PushSumMatrix(*directed, 3));
}

}  // namespace
}  // namespace chorus::topologies
