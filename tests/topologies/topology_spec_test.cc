// Tests for TopologySpec / MakeTopology: each kind builds the graph its builder
// builds, bad fields are rejected with messages naming them.
#include "topologies/topology_spec.h"

#include <string>

#include <gtest/gtest.h>

#include "topologies/graph_builders.h"

namespace chorus::topologies {
namespace {

void ExpectSameEdges(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.NumNodes(), b.NumNodes());
  ASSERT_EQ(a.Period(), b.Period());
  for (int t = 0; t < a.Period(); ++t) {
    for (int i = 0; i < a.NumNodes(); ++i) {
      EXPECT_EQ(a.OutNeighbors(i, t), b.OutNeighbors(i, t)) << a.Name() << " node " << i;
    }
  }
}

TopologySpec Spec(GraphKind kind, std::vector<int> dims = {}, int degree = 0, uint64_t seed = 1) {
  TopologySpec spec;
  spec.kind = kind;
  spec.dims = std::move(dims);
  spec.degree = degree;
  spec.seed = seed;
  return spec;
}

TEST(TopologySpec, EveryKindBuildsItsGraph) {
  const int n = 8;
  struct Case {
    TopologySpec spec;
    Result<Graph> expected;
  };
  std::vector<Case> cases;
  cases.push_back({Spec(GraphKind::kRing, {}, 0, 1), RingGraph(n)});
  cases.push_back({Spec(GraphKind::kBidirectionalRing, {}, 0, 1), BidirectionalRingGraph(n)});
  cases.push_back({Spec(GraphKind::kTorus, {2, 4}, 0, 1), TorusGraph(n, {2, 4})});
  cases.push_back({Spec(GraphKind::kHypercube, {}, 0, 1), HypercubeGraph(n)});
  cases.push_back({Spec(GraphKind::kExponential, {}, 0, 1), ExponentialGraph(n)});
  cases.push_back({Spec(GraphKind::kOnePeerExponential, {}, 0, 1), OnePeerExponentialGraph(n)});
  cases.push_back({Spec(GraphKind::kRandomRegular, {}, 3, 99), RandomRegularGraph(n, 3, 99)});
  cases.push_back({Spec(GraphKind::kComplete, {}, 0, 1), CompleteGraph(n)});
  ASSERT_EQ(cases.size(), std::size(kGraphKindNames));
  for (const Case& c : cases) {
    EXPECT_EQ(FromName(kGraphKindNames, GraphKindName(c.spec.kind)), c.spec.kind);
    auto g = MakeTopology(c.spec, n);
    ASSERT_TRUE(g) << GraphKindName(c.spec.kind) << ": " << g.error().ToString();
    ASSERT_TRUE(c.expected);
    ExpectSameEdges(*g, *c.expected);
  }
}

// A kind named in a config is parsed by node/config (its errors: config_test.cc).
TEST(TopologySpec, UnknownKindNamesAreNotFound) {
  EXPECT_FALSE(FromName(kGraphKindNames, "star"));
  EXPECT_FALSE(FromName(kGraphKindNames, "Ring"));
  EXPECT_EQ(FromName(kGraphKindNames, "one-peer-exponential"), GraphKind::kOnePeerExponential);
}

TEST(TopologySpec, ShapeErrorsMentionTheClusterSize) {
  auto torus = MakeTopology(Spec(GraphKind::kTorus, {3, 3}, 0, 1), 8);
  ASSERT_FALSE(torus);
  EXPECT_NE(torus.error().message().find("torus 3x3 has 9 nodes but the cluster has 8"),
            std::string::npos)
      << torus.error().message();
  auto cube = MakeTopology(Spec(GraphKind::kHypercube, {}, 0, 1), 12);
  ASSERT_FALSE(cube);
  EXPECT_NE(cube.error().message().find("12"), std::string::npos);
}

TEST(TopologySpec, ValidationWithoutN) {
  EXPECT_TRUE(ValidateTopologySpec(Spec(GraphKind::kRing, {}, 0, 1)).ok());
  EXPECT_TRUE(ValidateTopologySpec(Spec(GraphKind::kTorus, {2, 4}, 0, 1)).ok());
  EXPECT_FALSE(ValidateTopologySpec(Spec(GraphKind::kTorus, {}, 0, 1)).ok());
  const Status bad_dim = ValidateTopologySpec(Spec(GraphKind::kTorus, {2, 0}, 0, 1));
  EXPECT_FALSE(bad_dim.ok());
  EXPECT_NE(bad_dim.message().find("dims[1]"), std::string::npos) << bad_dim.message();
  EXPECT_FALSE(ValidateTopologySpec(Spec(GraphKind::kRandomRegular, {}, -1, 1)).ok());
  // Fields a kind does not use are ignored.
  EXPECT_TRUE(ValidateTopologySpec(Spec(GraphKind::kRing, {0}, -5, 1)).ok());
}

}  // namespace
}  // namespace chorus::topologies
