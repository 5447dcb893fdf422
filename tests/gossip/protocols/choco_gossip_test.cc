// Tests of CHOCO-gossip over the local transport: with sign and top-k
// compression the nodes still reach the exact average (no training), the sum is
// conserved every round, and non-finite messages are rejected by everyone alike.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gossip/protocols/choco_gossip.h"
#include "tests/gossip/gossip_test_util.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

using testing::ConsensusDistance;
using testing::MeanOf;
using testing::RandomVector;
using testing::RunGossipNodes;

topologies::Graph ChocoMust(Result<topologies::Graph> g) {
  EXPECT_TRUE(g.has_value()) << g.error().ToString();
  return std::move(*g);
}

struct ChocoRun {
  std::vector<std::vector<float>> start;
  std::vector<std::vector<float>> end;
  std::vector<GossipStats> stats;
  int rounds_used = 0;
};

// Runs CHOCO until the exact consensus distance is below `target` (checked every
// 50 rounds through a shared record) or max_rounds.
ChocoRun RunChoco(const topologies::Graph& graph, const ChocoOptions& options, int max_rounds,
                  size_t len, double target, int nan_rank = -1) {
  const int n = graph.NumNodes();
  ChocoRun run;
  run.start.resize(n);
  run.end.resize(n);
  run.stats.resize(n);
  std::vector<std::vector<std::vector<float>>> snapshots(max_rounds / 50 + 1,
                                                         std::vector<std::vector<float>>(n));
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto p, ChocoGossip::Create(t, graph, options));
    auto x = RandomVector(81, r, len, 0.5, 1.5);
    if (r == nan_rank) x[2] = NAN;
    run.start[r] = x;
    for (int round = 0; round < max_rounds; ++round) {
      CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
      if ((round + 1) % 50 == 0) snapshots[(round + 1) / 50 - 1][r] = x;
    }
    run.end[r] = x;
    run.stats[r] = p->Stats();
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  }
  run.rounds_used = max_rounds;
  for (size_t k = 0; k + 1 < snapshots.size(); ++k) {
    if (ConsensusDistance(snapshots[k]) < target) {
      run.rounds_used = static_cast<int>(50 * (k + 1));
      break;
    }
  }
  return run;
}

void ExpectExactAverage(const ChocoRun& run) {
  const auto mean0 = MeanOf(run.start);
  // Consensus: below 1e-6 relative (values in [0.5, 1.5]).
  EXPECT_LT(ConsensusDistance(run.end), 1e-6);
  // At the exact average: each round conserves the sum up to float rounding of
  // the update (one rounding per element and node, ~6e-8 relative, random signs),
  // so over ~1000 rounds the average moves by ~1e-6 relative at most.
  for (const auto& x : run.end) {
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], mean0[i], 5e-6 * mean0[i]) << i;
  }
}

TEST(ChocoGossipTest, SignCompressionReachesTheExactAverage) {
  ChocoOptions options;
  options.codec.kind = CodecKind::kSign;
  options.codec.chunk = 16;
  options.gamma = 0.3;
  auto run = RunChoco(ChocoMust(topologies::BidirectionalRingGraph(5)), options, 1000, 64, 1e-6);
  ExpectExactAverage(run);
  RecordProperty("rounds_to_1e-6", run.rounds_used);
}

TEST(ChocoGossipTest, TopKCompressionReachesTheExactAverage) {
  ChocoOptions options;
  options.codec.kind = CodecKind::kTopK;
  options.codec.ratio = 0.1;
  // With 10% of the entries per round, gamma = 0.3 already diverges on this torus
  // (CHOCO needs gamma to shrink with the compression); 0.15 converges.
  options.gamma = 0.15;
  auto run = RunChoco(ChocoMust(topologies::TorusGraph(6, {2, 3})), options, 1000, 64, 1e-6);
  ExpectExactAverage(run);
  RecordProperty("rounds_to_1e-6", run.rounds_used);
}

TEST(ChocoGossipTest, RejectsNonFiniteDifferencesOnEverySide) {
  ChocoOptions options;
  options.codec.kind = CodecKind::kNone;
  options.gamma = 0.5;
  const auto graph = ChocoMust(topologies::BidirectionalRingGraph(4));
  auto run = RunChoco(graph, options, 10, 8, 0.0, /*nan_rank=*/0);
  // Rank 0 rejects its own message each round, ranks 1 and 3 (its neighbours)
  // reject it too; rank 2 never sees it.
  EXPECT_EQ(run.stats[0].rejected_nonfinite, 10u);
  EXPECT_EQ(run.stats[1].rejected_nonfinite, 10u);
  EXPECT_EQ(run.stats[3].rejected_nonfinite, 10u);
  EXPECT_EQ(run.stats[2].rejected_nonfinite, 0u);
  for (int r = 1; r < 4; ++r) {
    for (float v : run.end[r]) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus::gossip
