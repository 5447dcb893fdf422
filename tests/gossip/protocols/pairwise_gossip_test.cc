// Tests of asynchronous pairwise gossip (AD-PSGD) over the local transport:
// nodes of different speeds converge to the average (fast nodes taking more
// steps), no deadlock under contention, bounded staleness, and a dead peer named
// in the error.
#include "gossip/protocols/pairwise_gossip.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "tests/gossip/gossip_test_util.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

using testing::ConsensusDistance;
using testing::RandomVector;
using testing::RunGossipNodes;
using testing::TotalSum;

topologies::Graph Must(Result<topologies::Graph> g) {
  EXPECT_TRUE(g.has_value()) << g.error().ToString();
  return std::move(*g);
}

struct PairwiseRun {
  std::vector<std::vector<float>> start;
  std::vector<std::vector<float>> end;
  std::vector<GossipStats> stats;
  std::vector<int64_t> steps;
};

// Each node steps (sleeping sleep(rank) per step) until it has done max_steps or
// `duration` has passed, then calls Finish.
PairwiseRun RunPairwise(const topologies::Graph& graph, const PairwiseOptions& options,
                        std::chrono::microseconds (*sleep)(int), int max_steps,
                        std::chrono::milliseconds duration) {
  const int n = graph.NumNodes();
  PairwiseRun run;
  run.start.resize(n);
  run.end.resize(n);
  run.stats.resize(n);
  run.steps.assign(n, 0);
  const auto stop_at = Clock::now() + duration;
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    auto x = RandomVector(91, r, 48, 1.0, 2.0);
    run.start[r] = x;
    CHORUS_ASSIGN_OR_RETURN(auto p, PairwiseGossip::Create(t, graph, options, x));
    int64_t step = 0;
    for (; step < max_steps && Clock::now() < stop_at; ++step) {
      if (sleep) std::this_thread::sleep_for(sleep(r));
      CHORUS_RETURN_IF_ERROR(p->Mix(x, step, Deadline::AfterSeconds(20)));
    }
    CHORUS_RETURN_IF_ERROR(p->Finish(x, Deadline::AfterSeconds(20)));
    run.end[r] = x;
    run.stats[r] = p->Stats();
    run.steps[r] = step;
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  }
  return run;
}

// Pairwise averaging conserves the sum: the two sides add opposite deltas; each
// delta costs one float rounding per element on each side (values in [1, 2]:
// <= 2^-23 absolute). Over a few thousand exchanges with random signs the total
// of ~400 values of ~1.5 drifts by far less than 1e-6 relative.
void ExpectSumConserved(const PairwiseRun& run) {
  const double before = TotalSum(run.start);
  EXPECT_NEAR(TotalSum(run.end), before, 1e-6 * before);
}

std::chrono::microseconds SpeedByRank(int rank) {
  return std::chrono::microseconds(100 + 300 * rank);
}

TEST(PairwiseGossipTest, NodesOfDifferentSpeedsConvergeToTheAverage) {
  const auto graph = Must(topologies::HypercubeGraph(8));
  auto run =
      RunPairwise(graph, PairwiseOptions{}, &SpeedByRank, 1 << 30, std::chrono::milliseconds(300));
  ExpectSumConserved(run);
  // Hundreds of pairwise averagings on a hypercube: the spread is at float
  // rounding level (~1e-7); 1e-5 leaves room for the last few exchanges.
  EXPECT_LT(ConsensusDistance(run.end), 1e-5);
  EXPECT_GT(run.steps[0], run.steps[7]) << "the fast node must take more steps";
  for (int r = 0; r < 8; ++r) {
    EXPECT_GT(run.stats[r].exchanges, 0u) << "rank " << r;
    EXPECT_GT(run.stats[r].served, 0u) << "rank " << r;
  }
}

TEST(PairwiseGossipTest, NoDeadlockUnderContention) {
  // Every node of a complete graph of 8 initiates back to back: pairs pick each
  // other at once and requests meet busy nodes all the time.
  const auto graph = Must(topologies::CompleteGraph(8));
  PairwiseOptions options;
  options.retry_interval = std::chrono::microseconds(50);
  auto run = RunPairwise(graph, options, nullptr, 150, std::chrono::seconds(60));
  ExpectSumConserved(run);
  uint64_t exchanges = 0;
  uint64_t busy = 0;
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(run.steps[r], 150);
    exchanges += run.stats[r].exchanges;
    busy += run.stats[r].declined_busy;
  }
  // Each exchange counts on both sides; most rounds end in an exchange.
  EXPECT_GT(exchanges, 8u * 150u);
  EXPECT_LT(ConsensusDistance(run.end), 1e-5);
  RecordProperty("busy_declines", static_cast<int>(busy));
}

std::chrono::microseconds SteepSpeeds(int rank) {
  return std::chrono::microseconds(1 + 250 * rank);
}

TEST(PairwiseGossipTest, BoundedStalenessHolds) {
  const auto graph = Must(topologies::BidirectionalRingGraph(6));
  PairwiseOptions options;
  options.max_staleness = 2;
  options.staleness_policy = StalenessPolicy::kWait;
  auto run = RunPairwise(graph, options, &SteepSpeeds, 60, std::chrono::seconds(60));
  ExpectSumConserved(run);
  uint64_t stale = 0;
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(run.steps[r], 60);
    EXPECT_LE(run.stats[r].max_staleness_seen, 2) << "rank " << r;
    stale += run.stats[r].declined_stale;
  }
  // Rank 0 steps without sleeping next to rank 5 (1.25 ms per step): it runs
  // ahead and must be held back.
  EXPECT_GT(stale, 0u);
}

TEST(PairwiseGossipTest, NonFiniteValuesAreRejectedBothWays) {
  // Rank 0 holds a NaN: the others refuse its requests (DECLINE_REJECTED) and
  // drop its answers, so they stay finite; both count the rejections.
  const auto graph = Must(topologies::CompleteGraph(3));
  std::vector<std::vector<float>> finals(3);
  std::vector<GossipStats> stats(3);
  auto statuses = RunGossipNodes(3, [&](int r, Transport& t, LocalHub&) -> Status {
    auto x = RandomVector(93, r, 20);
    if (r == 0) x[4] = NAN;
    CHORUS_ASSIGN_OR_RETURN(auto p, PairwiseGossip::Create(t, graph, PairwiseOptions{}, x));
    for (int step = 0; step < 40; ++step) {
      CHORUS_RETURN_IF_ERROR(p->Mix(x, step, Deadline::AfterSeconds(20)));
    }
    CHORUS_RETURN_IF_ERROR(p->Finish(x, Deadline::AfterSeconds(20)));
    finals[r] = x;
    stats[r] = p->Stats();
    return Status::Ok();
  });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  // 40 rounds each: rank 0 picks rank 1 or 2 about 20 times each and ranks 1, 2
  // pick rank 0 about 20 times; every such exchange is rejected on one side.
  EXPECT_GT(stats[1].rejected_nonfinite + stats[2].rejected_nonfinite, 20u);
  for (int r = 1; r < 3; ++r) {
    for (float v : finals[r]) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
  }
  EXPECT_LT(ConsensusDistance({finals[1], finals[2]}), 1e-5);
}

TEST(PairwiseGossipTest, ADeadPeerIsNamed) {
  const auto graph = Must(topologies::CompleteGraph(3));
  std::vector<Status> failures(3);
  std::latch both_failed(2);
  auto statuses = RunGossipNodes(3, [&](int r, Transport& t, LocalHub& hub) -> Status {
    if (r == 2) {
      hub.Kill(2);
      return Status::Ok();
    }
    auto x = RandomVector(95, r, 16);
    CHORUS_ASSIGN_OR_RETURN(auto p, PairwiseGossip::Create(t, graph, PairwiseOptions{}, x));
    for (int step = 0; step < 500; ++step) {
      Status s = p->Mix(x, step, Deadline::AfterSeconds(20));
      if (!s.ok()) {
        failures[r] = s;
        break;
      }
    }
    both_failed.arrive_and_wait();  // keep serving the other survivor until it is done
    return Status::Ok();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_EQ(failures[r].code(), StatusCode::kUnavailable) << failures[r].ToString();
    EXPECT_NE(failures[r].message().find("rank 2 (local2)"), std::string::npos)
        << failures[r].ToString();
  }
}

}  // namespace
}  // namespace chorus::gossip
