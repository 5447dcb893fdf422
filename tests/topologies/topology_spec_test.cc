// Tests for TopologySpec / MakeTopology: each kind builds the graph its builder
// builds, unknown kinds and bad fields are rejected with messages naming them.
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

TEST(TopologySpec, EveryKindBuildsItsGraph) {
  const int n = 8;
  struct Case {
    TopologySpec spec;
    Result<Graph> expected;
  };
  std::vector<Case> cases;
  cases.push_back({{"ring", {}, 0, 1}, RingGraph(n)});
  cases.push_back({{"bidirectional-ring", {}, 0, 1}, BidirectionalRingGraph(n)});
  cases.push_back({{"torus", {2, 4}, 0, 1}, TorusGraph(n, {2, 4})});
  cases.push_back({{"hypercube", {}, 0, 1}, HypercubeGraph(n)});
  cases.push_back({{"exponential", {}, 0, 1}, ExponentialGraph(n)});
  cases.push_back({{"one-peer-exponential", {}, 0, 1}, OnePeerExponentialGraph(n)});
  cases.push_back({{"random-regular", {}, 3, 99}, RandomRegularGraph(n, 3, 99)});
  cases.push_back({{"complete", {}, 0, 1}, CompleteGraph(n)});
  ASSERT_EQ(cases.size(), TopologyKinds().size());
  for (const Case& c : cases) {
    EXPECT_TRUE(IsKnownTopologyKind(c.spec.kind));
    auto g = MakeTopology(c.spec, n);
    ASSERT_TRUE(g) << c.spec.kind << ": " << g.error().ToString();
    ASSERT_TRUE(c.expected);
    ExpectSameEdges(*g, *c.expected);
  }
}

TEST(TopologySpec, UnknownKindListsTheKnownOnes) {
  auto g = MakeTopology({"star", {}, 0, 1}, 4);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.error().message().find("'star'"), std::string::npos) << g.error().message();
  EXPECT_NE(g.error().message().find("one-peer-exponential"), std::string::npos);
  EXPECT_FALSE(IsKnownTopologyKind("Ring"));
}

TEST(TopologySpec, ShapeErrorsMentionTheClusterSize) {
  auto torus = MakeTopology({"torus", {3, 3}, 0, 1}, 8);
  ASSERT_FALSE(torus);
  EXPECT_NE(torus.error().message().find("torus 3x3 has 9 nodes but the cluster has 8"),
            std::string::npos)
      << torus.error().message();
  auto cube = MakeTopology({"hypercube", {}, 0, 1}, 12);
  ASSERT_FALSE(cube);
  EXPECT_NE(cube.error().message().find("12"), std::string::npos);
}

TEST(TopologySpec, ValidationWithoutN) {
  EXPECT_TRUE(ValidateTopologySpec({"ring", {}, 0, 1}).ok());
  EXPECT_TRUE(ValidateTopologySpec({"torus", {2, 4}, 0, 1}).ok());
  EXPECT_FALSE(ValidateTopologySpec({"torus", {}, 0, 1}).ok());
  const Status bad_dim = ValidateTopologySpec({"torus", {2, 0}, 0, 1});
  EXPECT_FALSE(bad_dim.ok());
  EXPECT_NE(bad_dim.message().find("dims[1]"), std::string::npos) << bad_dim.message();
  EXPECT_FALSE(ValidateTopologySpec({"random-regular", {}, -1, 1}).ok());
  // Fields a kind does not use are ignored.
  EXPECT_TRUE(ValidateTopologySpec({"ring", {0}, -5, 1}).ok());
}

}  // namespace
}  // namespace chorus::topologies
