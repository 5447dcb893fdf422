// Expulsion in one process: several ControlPlanes on 127.0.0.1. A name that
// one member expelled is refused by whoever coordinates, not only by the
// expeller, also when the expeller has gone since, and also when the view had
// dropped the name before the expulsion.
#include "node/control/control_plane.h"
#include "tests/node/control/control_test_util.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace chorus::node {
namespace {

using testing::Local;
using testing::StartOrDie;
using testing::TestConfig;

constexpr double kExpelWait = 10.0;

// Three members by rank: [0] coordinates, [1] expels, [2] is expelled.
struct Trio {
  std::vector<std::unique_ptr<ControlPlane>> by_rank;
  std::vector<std::string> names;  // by rank
  std::string coordinator_address;
};

Trio FormThree() {
  std::vector<std::unique_ptr<ControlPlane>> nodes;
  nodes.push_back(StartOrDie(TestConfig(3, {}), Local("a")));
  const std::string boot = nodes[0]->advertise_address();
  nodes.push_back(StartOrDie(TestConfig(3, {boot}), Local("b")));
  nodes.push_back(StartOrDie(TestConfig(3, {boot}), Local("c")));
  Trio trio;
  trio.by_rank.resize(3);
  for (auto& n : nodes) {
    Result<MembershipView> v = n->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
    if (!v) {
      ADD_FAILURE() << v.error().ToString();
      return {};
    }
    if (v->self_rank == 0) trio.coordinator_address = n->advertise_address();
    trio.names.clear();
    for (const Member& m : v->members) trio.names.push_back(m.name);
    trio.by_rank[static_cast<size_t>(v->self_rank)] = std::move(n);
  }
  return trio;
}

// The name's new process asks the coordinator to join: refused as expelled, naming why.
void ExpectRejoinRefused(const std::string& name, const std::string& coordinator_address) {
  auto again = StartOrDie(TestConfig(3, {coordinator_address}), Local(name));
  ASSERT_TRUE(again);
  Result<MembershipView> v = again->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
  ASSERT_FALSE(v.has_value()) << "the expelled name was admitted again";
  EXPECT_EQ(v.error().code(), StatusCode::kFailedPrecondition) << v.error().ToString();
  EXPECT_NE(v.error().message().find("was expelled"), std::string::npos) << v.error().message();
  EXPECT_NE(v.error().message().find("sent NaN"), std::string::npos) << v.error().message();
}

TEST(ControlExpulsionTest, TheCoordinatorRefusesANameAnotherMemberExpelledAfterTheExpellerLeft) {
  Trio t = FormThree();
  ASSERT_EQ(t.by_rank.size(), 3u);
  const std::string victim = t.names[2];
  t.by_rank[1]->Expel(victim, "sent NaN");
  Result<MembershipView> v = t.by_rank[0]->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  EXPECT_EQ(v->members.size(), 2u);
  t.by_rank[2].reset();
  t.by_rank[1].reset();  // the expeller goes: the coordinator still knows
  ExpectRejoinRefused(victim, t.coordinator_address);
}

TEST(ControlExpulsionTest, AnExpulsionAfterTheViewDroppedTheNameStillRefusesIt) {
  Trio t = FormThree();
  ASSERT_EQ(t.by_rank.size(), 3u);
  const std::string victim = t.names[2];
  t.by_rank[2].reset();  // silent, then dead: the view drops it first
  Result<MembershipView> v = t.by_rank[1]->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  ASSERT_EQ(v->members.size(), 2u);
  t.by_rank[1]->Expel(victim, "sent NaN");  // its poison is judged after the view dropped it
  // The coordinator learns it from the expeller's heartbeats.
  ExpectRejoinRefused(victim, t.coordinator_address);
}

}  // namespace
}  // namespace chorus::node
