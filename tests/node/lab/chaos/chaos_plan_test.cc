// The chaos schedule (PlanFaults): a function of its options alone, and one
// that never leaves fewer than min_running nodes training, kills and freezes
// only nodes that train, restarts only dead ones; and --faults parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "node/lab/chaos/chaos.h"

namespace chorus::node {
namespace {

ChaosPlanOptions Options(uint64_t seed) {
  ChaosPlanOptions o;
  o.num_nodes = 5;
  o.horizon_s = 1800.0;
  o.mtbf_s = 20.0;
  o.seed = seed;
  o.min_running = 2;
  o.max_freeze_s = 12.0;
  return o;
}

bool Same(const std::vector<PlannedFault>& a, const std::vector<PlannedFault>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].at_s != b[i].at_s || a[i].kind != b[i].kind || a[i].nodes != b[i].nodes ||
        a[i].duration_s != b[i].duration_s) {
      return false;
    }
  }
  return true;
}

TEST(ChaosPlanTest, TheSameSeedGivesTheSameSchedule) {
  const std::vector<PlannedFault> a = PlanFaults(Options(7)), b = PlanFaults(Options(7));
  EXPECT_TRUE(Same(a, b));
  EXPECT_FALSE(Same(a, PlanFaults(Options(8))));
  // About horizon / mtbf arrivals (90), less the few where nothing could happen.
  EXPECT_GT(a.size(), 50u);
  EXPECT_LT(a.size(), 140u);
}

TEST(ChaosPlanTest, EveryFaultFitsTheClusterItMeets) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ChaosPlanOptions o = Options(seed);
    std::vector<bool> dead(5, false);
    std::vector<double> frozen_until(5, 0.0);
    int kills = 0, stops = 0, restarts = 0, doubles = 0;
    double last = 0.0;
    for (const PlannedFault& f : PlanFaults(o)) {
      ASSERT_GE(f.at_s, last);
      ASSERT_LT(f.at_s, o.horizon_s);
      ASSERT_GE(f.at_s, o.first_fault_s);
      last = f.at_s;
      auto training = [&](int n) { return !dead[n] && frozen_until[n] <= f.at_s; };
      switch (f.kind) {
        case FaultKind::kKill:
          ++kills;
          doubles += f.nodes.size() == 2;
          ASSERT_TRUE(f.nodes.size() == 1 || f.nodes.size() == 2);
          for (int n : f.nodes) {
            ASSERT_TRUE(training(n)) << "seed " << seed << ": kill of node" << n << " at " << f.at_s;
            dead[n] = true;
          }
          break;
        case FaultKind::kStop:
          ++stops;
          ASSERT_EQ(f.nodes.size(), 1u);
          ASSERT_TRUE(training(f.nodes[0]));
          ASSERT_GE(f.duration_s, 0.5);
          ASSERT_LE(f.duration_s, o.max_freeze_s);
          frozen_until[f.nodes[0]] = f.at_s + f.duration_s;
          break;
        case FaultKind::kRestart:
          ++restarts;
          ASSERT_EQ(f.nodes.size(), 1u);
          ASSERT_TRUE(dead[f.nodes[0]]) << "restart of a live node";
          dead[f.nodes[0]] = false;
          break;
        case FaultKind::kPartition:
          ADD_FAILURE() << "a partition in a plan that asked for none";
          break;
      }
      int left = 0;
      for (int n = 0; n < 5; ++n) left += !dead[n] && frozen_until[n] <= f.at_s ? 1 : 0;
      ASSERT_GE(left, o.min_running) << "seed " << seed << " at " << f.at_s;
    }
    EXPECT_GT(kills, 0);
    EXPECT_GT(stops, 0);
    EXPECT_GT(restarts, 0);
    if (seed == 1) {
      EXPECT_GT(doubles, 0) << "two nodes at once, one kill in four";
    }
  }
}

TEST(ChaosPlanTest, OnlyTheKindsAsked) {
  ChaosPlanOptions o = Options(3);
  o.kinds = {FaultKind::kStop};
  const std::vector<PlannedFault> plan = PlanFaults(o);
  ASSERT_FALSE(plan.empty());
  for (const PlannedFault& f : plan) EXPECT_EQ(f.kind, FaultKind::kStop);
  // Restarts alone: nothing is ever dead, so nothing happens.
  o.kinds = {FaultKind::kRestart};
  EXPECT_TRUE(PlanFaults(o).empty());
}

TEST(ChaosPlanTest, FaultKindsParseAndBadOnesAreNamed) {
  auto kinds = ParseFaultKinds("kill,restart,kill");
  ASSERT_TRUE(kinds.has_value());
  EXPECT_EQ(*kinds, (std::vector<FaultKind>{FaultKind::kKill, FaultKind::kRestart}));
  auto bad = ParseFaultKinds("kill,partition2");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("'partition2'"), std::string::npos) << bad.error().message();
  EXPECT_FALSE(ParseFaultKinds("").has_value());
}

}  // namespace
}  // namespace chorus::node
