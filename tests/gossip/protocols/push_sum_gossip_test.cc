// Tests of push-sum gossip (SGP) over the local transport: weights sum to n on a
// directed time-varying graph, z converges to the average, local steps are
// carried into x, non-finite shares are rejected.
#include "gossip/protocols/push_sum_gossip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gossip/protocols/push_sum_wire.h"
#include "tests/gossip/gossip_test_util.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

using testing::MeanOf;
using testing::RandomVector;
using testing::RunGossipNodes;

topologies::Graph PushSumMust(Result<topologies::Graph> g) {
  EXPECT_TRUE(g.has_value()) << g.error().ToString();
  return std::move(*g);
}

struct PushSumRun {
  std::vector<std::vector<double>> weights;  // [round][rank] after the round
  std::vector<std::vector<float>> start;     // [rank]
  std::vector<std::vector<float>> final_z;   // [rank]
  std::vector<GossipStats> stats;            // [rank]
};

// `step(rank, round)` is added to every element before Mix (a local step), for
// rounds < step_rounds.
PushSumRun RunPushSum(const topologies::Graph& graph, int rounds, size_t len,
                      const PushSumOptions& options, int step_rounds = 0,
                      float (*step)(int, int) = nullptr, int nan_rank = -1) {
  const int n = graph.NumNodes();
  PushSumRun run;
  run.weights.assign(rounds, std::vector<double>(n, 0.0));
  run.start.resize(n);
  run.final_z.resize(n);
  run.stats.resize(n);
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto p, PushSumGossip::Create(t, graph, options));
    auto z = RandomVector(71, r, len);
    if (r == nan_rank) z[1] = NAN;
    run.start[r] = z;
    for (int round = 0; round < rounds; ++round) {
      if (round < step_rounds) {
        for (auto& v : z) v += step(r, round);
      }
      CHORUS_RETURN_IF_ERROR(p->Mix(z, round, Deadline::AfterSeconds(20)));
      run.weights[round][r] = p->weight();
    }
    run.final_z[r] = z;
    run.stats[r] = p->Stats();
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  }
  return run;
}

void ExpectConvergedTo(const PushSumRun& run, const std::vector<double>& target, double tol) {
  for (size_t r = 0; r < run.final_z.size(); ++r) {
    for (size_t i = 0; i < target.size(); ++i) {
      ASSERT_NEAR(run.final_z[r][i], target[i], tol) << "rank " << r << " element " << i;
    }
  }
}

TEST(PushSumGossipTest, WeightsSumToNAndZConvergesOnTimeVaryingDirectedGraphs) {
  // One-peer exponential (SGP's graph; every round is a permutation, so each w
  // stays 1) and an irregular two-round directed graph whose in-degrees differ,
  // so the weights move away from 1.
  auto irregular = topologies::Graph::Create(
      "irregular(5)", 5, {{{1, 2}, {2}, {3}, {4, 0}, {0}}, {{3}, {0, 4}, {1}, {2}, {1, 2}}});
  ASSERT_TRUE(irregular.has_value()) << irregular.error().ToString();
  for (auto graph : {PushSumMust(topologies::OnePeerExponentialGraph(6)), *irregular}) {
    SCOPED_TRACE(graph.Name());
    ASSERT_TRUE(graph.IsTimeVarying());
    const double n = graph.NumNodes();
    auto run = RunPushSum(graph, 80, 40, PushSumOptions{});
    bool varied = false;
    for (size_t t = 0; t < run.weights.size(); ++t) {
      double sum = 0.0;
      for (double w : run.weights[t]) {
        sum += w;
        varied = varied || w != 1.0;
      }
      // Column-stochastic shares conserve the weight; the only error is double
      // rounding of a few additions per round (~1e-16 relative).
      EXPECT_NEAR(sum, n, 1e-12) << "round " << t;
    }
    if (graph.NumNodes() == 5) {
      EXPECT_TRUE(varied);
    }
    // z_i -> average of the starting vectors (values in [-1, 1]); the bound is a
    // few hundred float roundings of the mixing, far above them (~1e-7 each).
    ExpectConvergedTo(run, MeanOf(run.start), 1e-5);
  }
}

TEST(PushSumGossipTest, ConvergesOnStaticDirectedGraphs) {
  // Directed ring of 5: the mixing's second eigenvalue is cos(pi / 5) = 0.81 in
  // modulus, so 100 rounds leave ~1e-9 of the initial spread.
  for (auto graph : {PushSumMust(topologies::RingGraph(5)), PushSumMust(topologies::ExponentialGraph(7))}) {
    SCOPED_TRACE(graph.Name());
    auto run = RunPushSum(graph, 100, 25, PushSumOptions{});
    ExpectConvergedTo(run, MeanOf(run.start), 1e-5);
  }
}

float Step(int rank, int round) { return 0.01f * static_cast<float>(rank + 1); }

TEST(PushSumGossipTest, LocalStepsAreCarriedIntoTheAverage) {
  // 10 rounds with a local step of 0.01 (rank + 1) per element, then pure mixing:
  // the consensus is the starting average plus the average of all steps,
  // 10 * 0.01 * (n + 1) / 2. With period 2 only every other round communicates.
  const auto graph = PushSumMust(topologies::OnePeerExponentialGraph(5));
  PushSumOptions options;
  options.period = 2;
  auto run = RunPushSum(graph, 160, 16, options, 10, &Step);
  auto target = MeanOf(run.start);
  for (auto& v : target) v += 10 * 0.01 * 3.0;
  // float rounding of values of magnitude ~1 over 80 mixing rounds.
  ExpectConvergedTo(run, target, 1e-5);
  EXPECT_EQ(run.stats[0].mix_rounds, 80u);
  EXPECT_EQ(run.stats[0].skipped_rounds, 80u);
}

TEST(PushSumGossipTest, RejectsNonFiniteShares) {
  const auto graph = PushSumMust(topologies::OnePeerExponentialGraph(4));
  auto run = RunPushSum(graph, 8, 12, PushSumOptions{}, 0, nullptr, /*nan_rank=*/0);
  uint64_t rejected = 0;
  for (const auto& s : run.stats) rejected += s.rejected_nonfinite;
  // Rank 0 keeps its own NaN and sends one share per round; each is rejected.
  EXPECT_EQ(rejected, 8u);
  for (int r = 1; r < 4; ++r) {
    for (float v : run.final_z[r]) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
  }
}

// A share encodes to its header and the codec's bytes, and decodes back.
TEST(PushSumWireTest, ShareRoundTrips) {
  const std::vector<std::byte> values = {std::byte{1}, std::byte{2}, std::byte{3}};
  const std::vector<std::byte> message = EncodePushSumShare(0.25, 3.5, values);
  ASSERT_EQ(message.size(), kPushSumHeaderBytes + values.size());
  auto share = DecodePushSumShare(message);
  ASSERT_TRUE(share.has_value()) << share.error().ToString();
  EXPECT_EQ(share->share, 0.25);
  EXPECT_EQ(share->weight, 3.5);
  EXPECT_EQ(std::vector<std::byte>(share->values.begin(), share->values.end()), values);
}

// A message without the whole header, and shares outside (0, 1], are refused.
TEST(PushSumWireTest, RefusesShortMessagesAndBadShares) {
  const std::vector<std::byte> whole = EncodePushSumShare(0.5, 1.0, {});
  auto shortened = DecodePushSumShare(std::span<const std::byte>(whole).first(kPushSumHeaderBytes - 1));
  ASSERT_FALSE(shortened.has_value());
  EXPECT_NE(shortened.error().message().find("15 bytes"), std::string::npos) << shortened.error().message();
  for (double p : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto bad = DecodePushSumShare(EncodePushSumShare(p, 1.0, {}));
    ASSERT_FALSE(bad.has_value()) << p;
    EXPECT_NE(bad.error().message().find("outside (0, 1]"), std::string::npos) << bad.error().message();
  }
}

}  // namespace
}  // namespace chorus::gossip
