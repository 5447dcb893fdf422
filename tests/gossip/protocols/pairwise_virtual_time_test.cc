// PairwiseGossip in ordered virtual time (event_order.h), as `chorus
// simulate` runs it: nodes of unequal modelled speeds average with the same
// partners at the same virtual moments on every run, so the values and the
// clocks they end with repeat bit for bit whatever the threads' interleaving
// on this host; the sum of the values is kept; the staleness bound holds,
// parking the waiting node in virtual time; and
// a fast node takes more steps in the same virtual time than a slow one.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gossip/protocols/pairwise_gossip.h"
#include "gossip/transport/local/local_transport.h"
#include "tests/gossip/gossip_test_util.h"
#include "tests/gossip/transport/transport_test_util.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

using testing::RandomVector;
using testing::TotalSum;

constexpr int kVirtualNodes = 6;
constexpr double kStepS = 1e-3;  // rank r computes (1 + r) ms a step

struct VirtualRun {
  std::vector<std::vector<float>> start;
  std::vector<std::vector<float>> end;
  std::vector<double> clock;   // each node's virtual clock after Finish
  std::vector<int64_t> steps;  // steps taken before the shared virtual end
  std::vector<GossipStats> stats;
};

// Every node steps until its clock passes `end_s` (a fast node takes more
// steps), mixing after each; then Finish. Each thread drops its transport when
// done, as a simulated node does (an owner that stays would hold the others).
VirtualRun RunVirtual(int64_t max_staleness, double end_s) {
  auto hub = testing::VirtualTimeHub(kVirtualNodes, 50e-6, 1.25e9, /*ordered=*/true);
  std::vector<std::unique_ptr<Transport>> transports = hub->MakeAll();
  Result<topologies::Graph> graph = topologies::BidirectionalRingGraph(kVirtualNodes);
  EXPECT_TRUE(graph);
  VirtualRun run;
  run.start.resize(kVirtualNodes);
  run.end.resize(kVirtualNodes);
  run.clock.resize(kVirtualNodes);
  run.steps.resize(kVirtualNodes);
  run.stats.resize(kVirtualNodes);
  std::vector<Status> statuses(kVirtualNodes);
  std::vector<std::thread> threads;
  for (int r = 0; r < kVirtualNodes; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Transport> t = std::move(transports[r]);
      statuses[r] = [&]() -> Status {
        std::vector<float> x = RandomVector(61, r, 64, 1.0, 2.0);
        run.start[r] = x;
        PairwiseOptions options;
        options.max_staleness = max_staleness;
        options.seed = 5 + static_cast<uint64_t>(r);
        CHORUS_ASSIGN_OR_RETURN(auto p, PairwiseGossip::Create(*t, *graph, options, x));
        int64_t step = 0;
        for (; hub->VirtualNow(r) < end_s; ++step) {
          hub->AdvanceVirtual(r, kStepS * (1 + r));
          CHORUS_RETURN_IF_ERROR(p->Mix(x, step, Deadline::AfterSeconds(60)));
        }
        CHORUS_RETURN_IF_ERROR(p->Finish(x, Deadline::AfterSeconds(60)));
        run.end[r] = x;
        run.steps[r] = step;
        run.stats[r] = p->Stats();
        run.clock[r] = hub->VirtualNow(r);
        return Status::Ok();
      }();
    });
  }
  for (std::thread& th : threads) th.join();
  for (int r = 0; r < kVirtualNodes; ++r) EXPECT_TRUE(statuses[r].ok()) << r << ": " << statuses[r].ToString();
  return run;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PairwiseVirtualTimeTest, UnboundedRunsRepeatBitForBitAndFastNodesStepMore) {
  const VirtualRun a = RunVirtual(/*max_staleness=*/-1, 0.06);
  const VirtualRun b = RunVirtual(-1, 0.06);
  for (int r = 0; r < kVirtualNodes; ++r) {
    EXPECT_TRUE(BitwiseEqual(a.end[r], b.end[r])) << "rank " << r;
    EXPECT_EQ(a.clock[r], b.clock[r]) << "rank " << r;
    EXPECT_EQ(a.steps[r], b.steps[r]) << "rank " << r;
    EXPECT_EQ(a.stats[r].exchanges, b.stats[r].exchanges) << "rank " << r;
    EXPECT_GT(a.stats[r].exchanges, 0u) << "rank " << r;
  }
  // Nobody waits for a slower neighbour: rank 0 (1 ms a step) steps about six
  // times as often as rank 5 (6 ms).
  EXPECT_GE(a.steps[0], 5 * a.steps[5]);
  // The two sides of each averaging add opposite halves: the sum is kept to
  // rounding, and the values moved towards one another.
  const double sum = TotalSum(a.start);
  EXPECT_NEAR(TotalSum(a.end), sum, 1e-6 * sum);
  EXPECT_LT(testing::ConsensusDistance(a.end), testing::ConsensusDistance(a.start));
}

TEST(PairwiseVirtualTimeTest, LockStepBoundRepeatsAndHolds) {
  const VirtualRun a = RunVirtual(/*max_staleness=*/0, 0.03);
  const VirtualRun b = RunVirtual(0, 0.03);
  for (int r = 0; r < kVirtualNodes; ++r) {
    EXPECT_TRUE(BitwiseEqual(a.end[r], b.end[r])) << "rank " << r;
    EXPECT_EQ(a.clock[r], b.clock[r]) << "rank " << r;
    // The bound: a node's lead over a live neighbour when it leaves a wait.
    EXPECT_LE(a.stats[r].max_staleness_seen, 1) << "rank " << r;
  }
  EXPECT_GT(a.stats[0].staleness_waits, 0u);  // the fastest waits for its neighbours
  EXPECT_EQ(a.steps[0], b.steps[0]);
}

}  // namespace
}  // namespace chorus::gossip
