// Tests of the consensus phase: the exact distance against a closed form and an
// independent double computation, the all-reduce average (bitwise-identical
// replicas, for every all-reduce algorithm), and gossip until a bound.
#include "gossip/protocols/consensus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/checksum.h"
#include "tests/gossip/gossip_test_util.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

using testing::ConsensusDistance;
using testing::MeanOf;
using testing::RandomVector;
using testing::RunGossipNodes;

TEST(ConsensusTest, MeasuresTheClosedFormDistance) {
  // Rank r holds (r + 1) v: the mean is (n + 1) / 2 v and the farthest replicas
  // (ranks 0 and n - 1) are (n - 1) / 2 ||v|| away, so the distance is
  // (n - 1) / (n + 1). v has small integer entries: every sum is exact.
  for (int n : {1, 2, 3, 5}) {
    std::vector<double> distances(n, -1.0);
    auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective world, Collective::Create(t));
      std::vector<float> x(37);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r + 1) * (1 + i % 4));
      AllreduceOptions options;
      options.tag_base = 100 * kTagsPerCollective;
      CHORUS_ASSIGN_OR_RETURN(distances[r],
                              MeasureConsensusDistance(world, x, options, options.tag_base));
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      // float rounding of the 1/n post-scale and the distance itself (~1e-7).
      EXPECT_NEAR(distances[r], (n - 1.0) / (n + 1.0), 1e-6) << "n " << n;
    }
  }
}

void CheckAllreduceAverage(int n, AllreduceAlgorithm algorithm) {
  SCOPED_TRACE(std::string(AllreduceAlgorithmName(algorithm)) + " n=" + std::to_string(n));
  std::vector<std::vector<float>> start(n), end(n);
  std::vector<ConsensusReport> reports(n);
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective world, Collective::Create(t));
    auto x = RandomVector(101, r, 1003);
    start[r] = x;
    ConsensusOptions options;
    options.method = ConsensusMethod::kAllreduceAverage;
    options.allreduce.algorithm = algorithm;
    options.allreduce.segment_elems = 100;  // several segments, lengths not divisible by n
    options.deadline = Deadline::AfterSeconds(20);
    CHORUS_ASSIGN_OR_RETURN(reports[r], RunConsensus(world, nullptr, x, options));
    end[r] = x;
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  const double before = ConsensusDistance(start);
  const auto mean = MeanOf(start);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(reports[r].identical);
    EXPECT_FALSE(reports[r].repaired);
    EXPECT_EQ(reports[r].distance_after, 0.0);
    // Float sums of n values in [-1, 1] (~1e-7 absolute) against the double mean.
    EXPECT_NEAR(reports[r].distance_before, before, 1e-5 * before);
    EXPECT_EQ(reports[r].checksum, reports[0].checksum);
    ASSERT_EQ(std::memcmp(end[r].data(), end[0].data(), end[0].size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
    for (size_t i = 0; i < mean.size(); ++i) ASSERT_NEAR(end[r][i], mean[i], 1e-6) << i;
  }
  EXPECT_EQ(WeightsChecksum(end[0]), reports[0].checksum);
}

TEST(ConsensusTest, AllreduceAverageGivesBitwiseIdenticalReplicas) {
  for (auto algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                         AllreduceAlgorithm::kHalvingDoubling,
                         AllreduceAlgorithm::kRecursiveDoubling}) {
    for (int n : {1, 3, 5}) CheckAllreduceAverage(n, algorithm);
  }
}

TEST(ConsensusTest, GossipUntilTheBound) {
  const int n = 6;
  auto ring = topologies::BidirectionalRingGraph(n);
  ASSERT_TRUE(ring.has_value());
  const std::vector<const topologies::Graph*> graphs = {&*ring, nullptr};
  for (const topologies::Graph* graph : graphs) {
    SCOPED_TRACE(graph ? graph->Name() : "complete");
    std::vector<std::vector<float>> start(n), end(n);
    std::vector<ConsensusReport> reports(n);
    auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective world, Collective::Create(t));
      auto x = RandomVector(111, r, 257, 0.0, 2.0);
      start[r] = x;
      ConsensusOptions options;
      options.method = ConsensusMethod::kGossip;
      options.bound = 1e-4;
      options.check_every = 5;
      options.max_rounds = 500;
      options.deadline = Deadline::AfterSeconds(20);
      CHORUS_ASSIGN_OR_RETURN(reports[r], RunConsensus(world, graph, x, options));
      end[r] = x;
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    const double after = ConsensusDistance(end);
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(reports[r].reached);
      EXPECT_LE(reports[r].distance_after, 1e-4);
      EXPECT_GT(reports[r].distance_before, 1e-4);
      EXPECT_GT(reports[r].gossip_rounds, 0);
      EXPECT_EQ(reports[r].gossip_rounds, reports[0].gossip_rounds);
      // The report's exact distance and the test's own (double) one: float sums
      // differ by ~1e-7 relative to the values, i.e. ~1e-3 of a 1e-4 distance.
      EXPECT_NEAR(reports[r].distance_after, after, 1e-2 * after + 1e-7);
    }
    if (!graph) {
      EXPECT_EQ(reports[0].gossip_rounds, 5) << "complete graph: exact in one round";
    }
    // D-PSGD keeps the mean (doubly stochastic W; float rounding ~1e-7 per round).
    const auto m0 = MeanOf(start);
    const auto m1 = MeanOf(end);
    for (size_t i = 0; i < m0.size(); ++i) EXPECT_NEAR(m1[i], m0[i], 1e-5);
  }
}

}  // namespace
}  // namespace chorus::gossip
