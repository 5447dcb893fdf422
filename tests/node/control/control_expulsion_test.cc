// Expulsion in one process: several ControlPlanes on 127.0.0.1. One member's
// accusation expels nobody; cluster.expel_quorum members' do, and then the
// name is refused by whoever coordinates, not only by the accusers, also
// when they have gone since, and also when the view had dropped the name
// before the accusations. And a member whose exchange failed with nobody
// gone asks, in its heartbeats, for the next epoch over the same members,
// at once when every member answers.
#include "node/control/control_plane.h"
#include "node/control/credentials.h"
#include "tests/node/control/control_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace chorus::node {
namespace {

using testing::Local;
using testing::StartOrDie;
using testing::TestConfig;

constexpr double kExpelWait = 10.0;

// Members by rank: [0] coordinates, the last one is accused.
struct Formed {
  std::vector<std::unique_ptr<ControlPlane>> by_rank;
  std::vector<std::string> names;  // by rank
  std::string coordinator_address;
};

ClusterConfig QuorumConfig(int n, std::vector<std::string> bootstrap, int quorum) {
  ClusterConfig c = TestConfig(n, std::move(bootstrap));
  c.expel_quorum = quorum;
  return c;
}

Formed Form(int n, int quorum) {
  std::vector<std::unique_ptr<ControlPlane>> nodes;
  nodes.push_back(StartOrDie(QuorumConfig(n, {}, quorum), Local("a")));
  const std::string boot = nodes[0]->advertise_address();
  for (int i = 1; i < n; ++i) {
    nodes.push_back(StartOrDie(QuorumConfig(n, {boot}, quorum), Local(std::string(1, static_cast<char>('a' + i)))));
  }
  Formed f;
  f.by_rank.resize(static_cast<size_t>(n));
  for (auto& node : nodes) {
    Result<MembershipView> v = node->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
    if (!v) {
      ADD_FAILURE() << v.error().ToString();
      return {};
    }
    if (v->self_rank == 0) f.coordinator_address = node->advertise_address();
    f.names.clear();
    for (const Member& m : v->members) f.names.push_back(m.name);
    f.by_rank[static_cast<size_t>(v->self_rank)] = std::move(node);
  }
  return f;
}

// The name's new process asks the coordinator to join: refused as expelled, naming why.
void ExpectRejoinRefused(const std::string& name, const std::string& coordinator_address, int quorum) {
  auto again = StartOrDie(QuorumConfig(3, {coordinator_address}, quorum), Local(name));
  ASSERT_TRUE(again);
  Result<MembershipView> v = again->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
  ASSERT_FALSE(v.has_value()) << "the expelled name was admitted again";
  EXPECT_EQ(v.error().code(), StatusCode::kFailedPrecondition) << v.error().ToString();
  EXPECT_NE(v.error().message().find("was expelled"), std::string::npos) << v.error().message();
  EXPECT_NE(v.error().message().find("sent NaN"), std::string::npos) << v.error().message();
}

TEST(ControlExpulsionTest, OneMembersWordExpelsNobodyAndASecondMembersDoes) {
  Formed f = Form(4, /*quorum=*/2);
  ASSERT_EQ(f.by_rank.size(), 4u);
  const std::string victim = f.names[3];
  f.by_rank[1]->Expel(victim, "sent NaN");
  // Twenty heartbeats: every member heard the accusation, and nobody acted.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const auto& node : f.by_rank) {
    EXPECT_EQ(node->Epoch(), 0u) << node->name();
    EXPECT_TRUE(node->ExpelledSelf().empty()) << node->name();
  }
  f.by_rank[2]->Expel(victim, "sent NaN");
  Result<MembershipView> v = f.by_rank[0]->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  EXPECT_EQ(v->members.size(), 3u);
  EXPECT_EQ(v->Find(victim), nullptr);
  // The accusers go: the coordinator, which accused nobody, still refuses the name.
  f.by_rank[3].reset();
  f.by_rank[2].reset();
  f.by_rank[1].reset();
  ExpectRejoinRefused(victim, f.coordinator_address, 2);
}

TEST(ControlExpulsionTest, OneMembersRepeatedWordCountsOnce) {
  // Each member's accusation counts once: the same member asking again adds
  // nothing towards a quorum, nor does its asking about another name.
  Formed f = Form(3, /*quorum=*/2);
  ASSERT_EQ(f.by_rank.size(), 3u);
  f.by_rank[1]->Expel(f.names[2], "sent NaN");
  f.by_rank[1]->Expel(f.names[2], "sent NaN again");
  f.by_rank[1]->Expel(f.names[0], "sent NaN");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const auto& node : f.by_rank) EXPECT_EQ(node->Epoch(), 0u) << node->name();
}

TEST(ControlExpulsionTest, AQuorumOfOneIsAnyMembersWord) {
  Formed f = Form(3, /*quorum=*/1);
  ASSERT_EQ(f.by_rank.size(), 3u);
  const std::string victim = f.names[2];
  f.by_rank[1]->Expel(victim, "sent NaN");
  Result<MembershipView> v = f.by_rank[0]->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  EXPECT_EQ(v->members.size(), 2u);
  f.by_rank[2].reset();
  f.by_rank[1].reset();  // the accuser goes: the coordinator still knows
  ExpectRejoinRefused(victim, f.coordinator_address, 1);
}

TEST(ControlExpulsionTest, AnExpulsionAfterTheViewDroppedTheNameStillRefusesIt) {
  Formed f = Form(4, /*quorum=*/2);
  ASSERT_EQ(f.by_rank.size(), 4u);
  const std::string victim = f.names[3];
  f.by_rank[3].reset();  // silent, then dead: the view drops it first
  Result<MembershipView> v = f.by_rank[1]->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  ASSERT_EQ(v->members.size(), 3u);
  // Its poison is judged after the view dropped it; the coordinator hears
  // both accusations in the accusers' heartbeats.
  f.by_rank[1]->Expel(victim, "sent NaN");
  f.by_rank[2]->Expel(victim, "sent NaN");
  ExpectRejoinRefused(victim, f.coordinator_address, 2);
}

// With credentials, accusations are signed over the cluster and its run
// (EpochView.runSalt, drawn with epoch 0): a member admitted after epoch 0
// learns the run from the view that admits it, so its signed word counts
// towards a quorum like a founder's.
TEST(ControlExpulsionTest, AJoinersSignedAccusationCountsInTheRunItJoined) {
  Result<Issuer> issuer = Issuer::Generate();
  ASSERT_TRUE(issuer) << issuer.error().ToString();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("run_accusations_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto config = [&](const std::string& name, std::vector<std::string> bootstrap) {
    Result<NodeCredentials> c = issuer->Issue(name);
    EXPECT_TRUE(c) << c.error().ToString();
    const std::string path = (dir / (name + ".cred")).string();
    EXPECT_TRUE(c->Save(path).ok());
    ClusterConfig cc = QuorumConfig(3, std::move(bootstrap), /*quorum=*/2);
    cc.issuer = KeyHex(issuer->public_key());
    cc.credential = path;
    return cc;
  };
  std::vector<std::unique_ptr<ControlPlane>> nodes;
  nodes.push_back(StartOrDie(config("a", {}), Local("a")));
  const std::string boot = nodes[0]->advertise_address();
  nodes.push_back(StartOrDie(config("b", {boot}), Local("b")));
  nodes.push_back(StartOrDie(config("c", {boot}), Local("c")));
  for (auto& node : nodes) {
    Result<MembershipView> v = node->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
    ASSERT_TRUE(v) << v.error().ToString();
    node->AdmitOnItsOwn(uint64_t{1} << 62);  // whoever coordinates admits d without a training loop
  }
  nodes.push_back(StartOrDie(config("d", {boot}), Local("d")));
  Result<MembershipView> joined = nodes[3]->WaitForEpoch0(Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(joined) << joined.error().ToString();
  ASSERT_GE(joined->epoch, 1u);
  // The joiner and one founder accuse c: two credential holders of one run.
  nodes[3]->Expel("c", "sent NaN");
  nodes[1]->Expel("c", "sent NaN");
  Result<MembershipView> v = nodes[0]->WaitForEpochAbove(joined->epoch, Deadline::AfterSeconds(kExpelWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  EXPECT_EQ(v->members.size(), 3u);
  EXPECT_EQ(v->Find("c"), nullptr);
  std::filesystem::remove_all(dir);
}

// A member's exchange failed and no member is gone (ControlPlane::
// RequestReform): every member moves to the next epoch over the same
// members, marked as asked for; a request for an epoch already past is
// ignored; the coordinator's own request needs no heartbeat.
TEST(ControlReformTest, AMembersRequestBringsEveryMemberToTheNextEpochOverTheSameMembers) {
  Formed f = Form(3, 2);
  ASSERT_EQ(f.by_rank.size(), 3u);
  f.by_rank[2]->RequestReform(0);
  for (auto& node : f.by_rank) {
    Result<MembershipView> v = node->WaitForEpochAbove(0, Deadline::AfterSeconds(kExpelWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    EXPECT_EQ(v->epoch, 1u);
    EXPECT_TRUE(v->reform);
    EXPECT_TRUE(v->departed.empty());
    EXPECT_TRUE(v->joined.empty());
    ASSERT_EQ(v->size(), 3);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(v->members[static_cast<size_t>(r)].name, f.names[static_cast<size_t>(r)]);
  }
  f.by_rank[1]->RequestReform(0);  // epoch 1 is there already
  f.by_rank[0]->RequestReform(1);
  for (auto& node : f.by_rank) {
    Result<MembershipView> v = node->WaitForEpochAbove(1, Deadline::AfterSeconds(kExpelWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    EXPECT_EQ(v->epoch, 2u);
    EXPECT_TRUE(v->reform);
    EXPECT_EQ(v->size(), 3);
  }
  Result<MembershipView> none = f.by_rank[2]->WaitForEpochAbove(2, Deadline::AfterSeconds(1.0));
  EXPECT_FALSE(none.has_value()) << "a stale request moved the cluster to epoch " << none->epoch;
}

// Whether a re-form may be asked for at once (ControlPlane::
// EveryMemberAnswers): yes while every member answers, no for an epoch the
// view is not at, and no once a member is gone (its connection closed).
TEST(ControlReformTest, EveryMemberAnswersUntilOneGoes) {
  Formed f = Form(3, 2);
  ASSERT_EQ(f.by_rank.size(), 3u);
  EXPECT_TRUE(f.by_rank[0]->EveryMemberAnswers(0));
  EXPECT_TRUE(f.by_rank[2]->EveryMemberAnswers(0));
  EXPECT_FALSE(f.by_rank[0]->EveryMemberAnswers(1));
  f.by_rank[2].reset();
  // Each survivor sees the closed connection on its own control thread.
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  for (int r = 0; r < 2; ++r) {
    ControlPlane& survivor = *f.by_rank[static_cast<size_t>(r)];
    while (survivor.EveryMemberAnswers(0) && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(survivor.EveryMemberAnswers(0)) << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus::node
