// Tests for the graph builders and Graph: degrees and edges of every topology for
// several n (powers of two and not), in-neighbours mirroring out-neighbours, and the
// errors when a shape does not fit n.
#include "topologies/graph_builders.h"
#include "topologies/host_groups.h"
#include "topologies/spectral_gap.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

const std::vector<int> kSizes = {1, 2, 3, 5, 8, 12, 16};

// Expected out-neighbours from a predicate, ascending, self excluded.
std::vector<int> Expected(int n, int i, const auto& is_edge) {
  std::vector<int> out;
  for (int j = 0; j < n; ++j) {
    if (j != i && is_edge(i, j)) out.push_back(j);
  }
  return out;
}

// In-neighbours must be exactly the reverse of out-neighbours, in every round.
void ExpectInMirrorsOut(const Graph& g) {
  for (int t = 0; t < g.Period(); ++t) {
    for (int j = 0; j < g.NumNodes(); ++j) {
      std::vector<int> expected;
      for (int i = 0; i < g.NumNodes(); ++i) {
        if (g.HasEdge(i, j, t)) expected.push_back(i);
      }
      EXPECT_EQ(g.InNeighbors(j, t), expected) << g.Name() << " round " << t << " node " << j;
    }
  }
}

int Mod(int v, int n) { return ((v % n) + n) % n; }

TEST(GraphBuilders, RingIsDirectedSuccessor) {
  for (int n : kSizes) {
    auto g = RingGraph(n);
    ASSERT_TRUE(g) << g.error().ToString();
    EXPECT_EQ(g->NumNodes(), n);
    EXPECT_EQ(g->Period(), 1);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, [n](int a, int b) { return b == Mod(a + 1, n); }));
      EXPECT_EQ(g->OutDegree(i), n == 1 ? 0 : 1);
    }
    EXPECT_EQ(g->IsUndirected(), n <= 2) << "n = " << n;
    EXPECT_TRUE(g->IsConnected());
    ExpectInMirrorsOut(*g);
  }
}

TEST(GraphBuilders, BidirectionalRingHasBothNeighbours) {
  for (int n : kSizes) {
    auto g = BidirectionalRingGraph(n);
    ASSERT_TRUE(g) << g.error().ToString();
    EXPECT_TRUE(g->IsUndirected());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, [n](int a, int b) {
                  return b == Mod(a + 1, n) || b == Mod(a - 1, n);
                }));
      EXPECT_EQ(g->OutDegree(i), std::min(n - 1, 2));
    }
    ExpectInMirrorsOut(*g);
  }
}

TEST(GraphBuilders, TorusNeighboursDifferByOneAlongOneDimension) {
  struct Case {
    std::vector<int> dims;
    int degree;
  };
  const std::vector<Case> cases = {{{1}, 0},    {{2}, 1},       {{5}, 2},    {{1, 5}, 2},
                                   {{2, 4}, 3}, {{3, 4}, 4},    {{4, 4}, 4}, {{2, 2, 2}, 3},
                                   {{2, 3, 2}, 4}, {{2, 2, 2, 2}, 4}};
  for (const Case& c : cases) {
    int n = 1;
    for (int d : c.dims) n *= d;
    auto g = TorusGraph(n, c.dims);
    ASSERT_TRUE(g) << g.error().ToString();
    EXPECT_TRUE(g->IsUndirected()) << g->Name();
    EXPECT_TRUE(g->IsConnected()) << g->Name();
    // Row-major coordinates, last dimension fastest.
    auto coords = [&c](int i) {
      std::vector<int> x(c.dims.size());
      for (int k = static_cast<int>(c.dims.size()) - 1; k >= 0; --k) {
        x[k] = i % c.dims[k];
        i /= c.dims[k];
      }
      return x;
    };
    auto is_edge = [&](int a, int b) {
      const auto xa = coords(a), xb = coords(b);
      int differing = 0;
      bool adjacent = true;
      for (size_t k = 0; k < xa.size(); ++k) {
        if (xa[k] == xb[k]) continue;
        ++differing;
        const int delta = Mod(xa[k] - xb[k], c.dims[k]);
        adjacent = adjacent && (delta == 1 || delta == c.dims[k] - 1);
      }
      return differing == 1 && adjacent;
    };
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, is_edge)) << g->Name() << " node " << i;
      EXPECT_EQ(g->OutDegree(i), c.degree) << g->Name();
    }
  }
}

TEST(GraphBuilders, TorusRejectsShapesThatDoNotFit) {
  auto g = TorusGraph(8, {3, 3});
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.error().message().find("torus 3x3 has 9 nodes but the cluster has 8"), std::string::npos)
      << g.error().message();
  EXPECT_FALSE(TorusGraph(8, {}));
  EXPECT_FALSE(TorusGraph(8, {0, 8}));
  EXPECT_FALSE(TorusGraph(8, {-2, -4}));
  EXPECT_FALSE(TorusGraph(12, {2, 2, 2}));
  // A product far beyond int must not overflow into a false match.
  auto huge = TorusGraph(16, {65536, 65536, 65536, 65536, 16});
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message().find("the cluster has 16"), std::string::npos);
}

TEST(GraphBuilders, HypercubeFlipsOneBit) {
  for (int n : {1, 2, 4, 8, 16}) {
    auto g = HypercubeGraph(n);
    ASSERT_TRUE(g) << g.error().ToString();
    EXPECT_TRUE(g->IsUndirected());
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, [](int a, int b) {
                  const int x = a ^ b;
                  return x != 0 && (x & (x - 1)) == 0;
                }));
      EXPECT_EQ(g->OutDegree(i), log2n);
    }
  }
  for (int n : {3, 5, 12}) {
    auto g = HypercubeGraph(n);
    ASSERT_FALSE(g) << n;
    EXPECT_NE(g.error().message().find("power-of-two"), std::string::npos);
    EXPECT_NE(g.error().message().find(std::to_string(n)), std::string::npos);
  }
}

TEST(GraphBuilders, ExponentialSendsToEveryPowerOfTwoBelowN) {
  for (int n : kSizes) {
    auto g = ExponentialGraph(n);
    ASSERT_TRUE(g) << g.error().ToString();
    int powers = 0;
    for (int p = 1; p < n; p *= 2) ++powers;  // floor(log2(n - 1)) + 1 for n >= 2
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, [n](int a, int b) {
                  const int offset = Mod(b - a, n);
                  return offset != 0 && (offset & (offset - 1)) == 0;
                }));
      EXPECT_EQ(g->OutDegree(i), powers) << "n = " << n;
      EXPECT_EQ(g->InDegree(i), powers) << "n = " << n;
    }
    ExpectInMirrorsOut(*g);
    EXPECT_TRUE(g->IsConnected());
  }
  // n = 3: offsets 1 and 2 reach everyone, so the graph is the complete one.
  EXPECT_TRUE(ExponentialGraph(3)->IsUndirected());
  EXPECT_FALSE(ExponentialGraph(8)->IsUndirected());
}

TEST(GraphBuilders, OnePeerExponentialCyclesThroughPowersOfTwo) {
  for (int n : kSizes) {
    auto g = OnePeerExponentialGraph(n);
    ASSERT_TRUE(g) << g.error().ToString();
    std::vector<int> powers;
    for (int p = 1; p < n; p *= 2) powers.push_back(p);
    EXPECT_EQ(g->Period(), std::max<int>(1, static_cast<int>(powers.size()))) << "n = " << n;
    EXPECT_EQ(g->IsTimeVarying(), powers.size() > 1);
    EXPECT_FALSE(g->IsTimeVarying() && g->IsUndirected());
    for (int t = -3; t < 3 * g->Period() + 2; ++t) {
      const int k = Mod(t, g->Period());
      for (int i = 0; i < n; ++i) {
        if (n == 1) {
          EXPECT_TRUE(g->OutNeighbors(i, t).empty());
          continue;
        }
        EXPECT_EQ(g->OutNeighbors(i, t), std::vector<int>{Mod(i + powers[k], n)})
            << "n = " << n << " round " << t << " node " << i;
        EXPECT_EQ(g->InNeighbors(i, t), std::vector<int>{Mod(i - powers[k], n)});
      }
    }
    ExpectInMirrorsOut(*g);
    EXPECT_TRUE(g->IsConnected());
  }
}

TEST(GraphBuilders, CompleteConnectsEveryPair) {
  for (int n : kSizes) {
    auto g = CompleteGraph(n);
    ASSERT_TRUE(g);
    EXPECT_TRUE(g->IsUndirected());
    EXPECT_EQ(g->NumDirectedEdges(), int64_t{n} * (n - 1));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(g->OutNeighbors(i), Expected(n, i, [](int, int) { return true; }));
    }
  }
}

TEST(GraphBuilders, RandomRegularIsSimpleRegularConnectedAndDeterministic) {
  struct Case {
    int n, d;
  };
  const std::vector<Case> cases = {{1, 0}, {2, 1}, {3, 2}, {5, 2}, {5, 4}, {8, 3},
                                   {12, 3}, {12, 8}, {16, 4}, {16, 13}, {64, 2}, {40, 6}};
  for (const Case& c : cases) {
    for (uint64_t seed : {1ULL, 42ULL, 0xfeedULL}) {
      auto g = RandomRegularGraph(c.n, c.d, seed);
      ASSERT_TRUE(g) << g.error().ToString();
      EXPECT_TRUE(g->IsUndirected()) << g->Name();
      EXPECT_TRUE(g->IsConnected()) << g->Name();
      for (int i = 0; i < c.n; ++i) EXPECT_EQ(g->OutDegree(i), c.d) << g->Name();
      ExpectInMirrorsOut(*g);
      // Same seed, same graph: every node builds it independently.
      auto again = RandomRegularGraph(c.n, c.d, seed);
      ASSERT_TRUE(again);
      for (int i = 0; i < c.n; ++i) EXPECT_EQ(g->OutNeighbors(i), again->OutNeighbors(i));
    }
  }
  // Different seeds give different graphs when there is room for them.
  auto a = RandomRegularGraph(16, 4, 1);
  auto b = RandomRegularGraph(16, 4, 2);
  ASSERT_TRUE(a && b);
  bool differ = false;
  for (int i = 0; i < 16; ++i) differ = differ || a->OutNeighbors(i) != b->OutNeighbors(i);
  EXPECT_TRUE(differ);
}

TEST(GraphBuilders, RandomRegularRejectsImpossibleDegrees) {
  EXPECT_FALSE(RandomRegularGraph(5, 3, 1));   // n*d odd
  EXPECT_FALSE(RandomRegularGraph(5, 5, 1));   // d >= n
  EXPECT_FALSE(RandomRegularGraph(5, -2, 1));  // negative
  EXPECT_FALSE(RandomRegularGraph(4, 1, 1));   // a matching: never connected
  EXPECT_FALSE(RandomRegularGraph(3, 0, 1));   // no edges
  auto odd = RandomRegularGraph(7, 3, 1);
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.error().message().find("odd"), std::string::npos) << odd.error().message();
}

TEST(GraphBuilders, EveryBuilderRejectsAnEmptyCluster) {
  EXPECT_FALSE(RingGraph(0));
  EXPECT_FALSE(BidirectionalRingGraph(-1));
  EXPECT_FALSE(TorusGraph(0, {1}));
  EXPECT_FALSE(HypercubeGraph(0));
  EXPECT_FALSE(ExponentialGraph(0));
  EXPECT_FALSE(OnePeerExponentialGraph(0));
  EXPECT_FALSE(RandomRegularGraph(0, 0, 1));
  EXPECT_FALSE(CompleteGraph(0));
}

TEST(Graph, CreateValidatesEdges) {
  auto sorted = Graph::Create("ok", 3, {{{2, 1}, {0}, {}}});
  ASSERT_TRUE(sorted) << sorted.error().ToString();
  EXPECT_EQ(sorted->OutNeighbors(0), (std::vector<int>{1, 2}));
  EXPECT_EQ(sorted->InNeighbors(0), (std::vector<int>{1}));
  EXPECT_FALSE(Graph::Create("self", 2, {{{0}, {}}}));
  EXPECT_FALSE(Graph::Create("duplicate", 2, {{{1, 1}, {}}}));
  EXPECT_FALSE(Graph::Create("range", 2, {{{2}, {}}}));
  EXPECT_FALSE(Graph::Create("size", 3, {{{1}, {0}}}));
  EXPECT_FALSE(Graph::Create("rounds", 3, {}));
  auto bad = Graph::Create("custom", 2, {{{1}, {}}, {{1}, {-1}}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("round 1"), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find("node 1"), std::string::npos);
}

TEST(Graph, ConnectivityLooksAtAllRoundsAndBothDirections) {
  // 0 -> 1 at round 0, 2 -> 1 at round 1: connected only through the union of rounds.
  auto g = Graph::Create("two rounds", 3, {{{1}, {}, {}}, {{}, {}, {1}}});
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->IsConnected());
  auto split = Graph::Create("split", 4, {{{1}, {0}, {3}, {2}}});
  ASSERT_TRUE(split);
  EXPECT_FALSE(split->IsConnected());
  EXPECT_TRUE(split->IsUndirected());
}

TEST(PlaceGraph, ARingInSiteOrderCrossesTwiceWithTheSameGap) {
  // 8 ranks alternating between two sites: the ring in rank order crosses
  // on every edge; placed in link-aware order, on two.
  std::vector<std::string> sites, hosts;
  for (int r = 0; r < 8; ++r) {
    sites.push_back(r % 2 == 0 ? "lab" : "home");
    hosts.push_back("h" + std::to_string(r));
  }
  auto flat = BidirectionalRingGraph(8);
  ASSERT_TRUE(flat);
  auto order = LinkAwareOrder(sites, hosts);
  ASSERT_TRUE(order);
  auto placed = PlaceGraph(*flat, *order, "in site order");
  ASSERT_TRUE(placed) << placed.error().ToString();
  EXPECT_EQ(placed->Name(), flat->Name() + " in site order");
  auto crossing = [&](const Graph& g) {
    int edges = 0;
    for (int i = 0; i < 8; ++i) {
      for (int j : g.OutNeighbors(i)) edges += sites[i] != sites[j] ? 1 : 0;
    }
    return edges;
  };
  EXPECT_EQ(crossing(*flat), 16);   // directed edges
  EXPECT_EQ(crossing(*placed), 4);  // two undirected edges
  EXPECT_TRUE(placed->IsUndirected());
  EXPECT_TRUE(placed->IsConnected());
  auto gap_flat = GraphSpectralGap(*flat);
  auto gap_placed = GraphSpectralGap(*placed);
  ASSERT_TRUE(gap_flat && gap_placed);
  EXPECT_NEAR(gap_placed->gap_per_round, gap_flat->gap_per_round, 1e-9);
  // A time-varying graph keeps its rounds.
  auto one_peer = OnePeerExponentialGraph(8);
  ASSERT_TRUE(one_peer);
  auto placed_one_peer = PlaceGraph(*one_peer, *order, "in site order");
  ASSERT_TRUE(placed_one_peer);
  EXPECT_EQ(placed_one_peer->Period(), one_peer->Period());
  for (int t = 0; t < one_peer->Period(); ++t) {
    for (int p = 0; p < 8; ++p) {
      EXPECT_EQ(placed_one_peer->OutDegree((*order)[p], t), one_peer->OutDegree(p, t));
    }
  }
}

TEST(PlaceGraph, RefusesAnythingButAPermutation) {
  auto ring = BidirectionalRingGraph(3);
  ASSERT_TRUE(ring);
  EXPECT_FALSE(PlaceGraph(*ring, {0, 1}, "x"));
  auto repeated = PlaceGraph(*ring, {0, 1, 1}, "x");
  ASSERT_FALSE(repeated);
  EXPECT_NE(repeated.error().message().find("rank 1 is out of range or repeated"), std::string::npos);
  EXPECT_FALSE(PlaceGraph(*ring, {0, 1, 3}, "x"));
}

}  // namespace
}  // namespace chorus::topologies
