// The pure membership rules: deterministic ranks, the address order that picks
// the founder candidate, and the liveness table.
#include "node/control/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <random>

namespace chorus::node {
namespace {

Member Named(const std::string& name, int hint = -1, const std::string& address = "127.0.0.1:1") {
  Member m;
  m.name = name;
  m.rank_hint = hint;
  m.control_address = address;
  return m;
}

// The names of members, or of the members death verdicts condemn.
template <typename Named>
std::vector<std::string> NamesOf(const std::vector<Named>& named) {
  std::vector<std::string> names;
  for (const Named& n : named) names.push_back(n.name);
  return names;
}

TEST(ControlMembershipTest, InitialRanksIgnoreArrivalOrder) {
  std::vector<Member> candidates = {Named("c"), Named("a", 5), Named("b"), Named("z", 0),
                                    Named("b", -1, "127.0.0.1:0")};
  const std::vector<std::string> expected = {"z", "a", "b", "b", "c"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(candidates.begin(), candidates.end(), rng);
    std::vector<Member> ranked = AssignInitialRanks(candidates);
    EXPECT_EQ(NamesOf(ranked), expected);
    for (size_t i = 0; i < ranked.size(); ++i) EXPECT_EQ(ranked[i].rank, static_cast<int>(i));
    // Equal names are ordered by control address.
    EXPECT_EQ(ranked[2].control_address, "127.0.0.1:0");
  }
}

// The founder candidate is the lowest address: hosts in text order, then
// ports as numbers, so "h:900" comes before "h:1000" although its text does not.
TEST(ControlMembershipTest, AddressOrderIsByHostThenNumericPort) {
  EXPECT_TRUE(AddressBefore("127.0.0.1:900", "127.0.0.1:1000"));
  EXPECT_FALSE(AddressBefore("127.0.0.1:1000", "127.0.0.1:900"));
  EXPECT_TRUE(AddressBefore("10.0.0.9:9999", "127.0.0.1:1"));
  EXPECT_TRUE(AddressBefore("[::1]:7100", "[::1]:7101"));
  EXPECT_TRUE(AddressBefore("alpha:7100", "beta:1"));
  EXPECT_FALSE(AddressBefore("127.0.0.1:7100", "127.0.0.1:7100"));
  // Text that is no address follows every address, in text order.
  EXPECT_TRUE(AddressBefore("127.0.0.1:7100", "no port"));
  EXPECT_FALSE(AddressBefore("no port", "127.0.0.1:7100"));
  EXPECT_TRUE(AddressBefore("a:b", "no port"));

  // A strict total order: every shuffle sorts the same way.
  const std::vector<std::string> sorted = {"10.0.0.2:80", "127.0.0.1:80", "127.0.0.1:443", "127.0.0.1:8080",
                                           "[::1]:1", "host-a:9", "host-a:10", "x:y", "zzz"};
  std::mt19937 rng(11);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> shuffled = sorted;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    std::sort(shuffled.begin(), shuffled.end(), AddressBefore);
    EXPECT_EQ(shuffled, sorted);
  }
}

TEST(ControlMembershipTest, NextRanksKeepSurvivorsThenJoiners) {
  std::vector<Member> survivors = AssignInitialRanks({Named("n0"), Named("n2"), Named("n3")});
  survivors.erase(survivors.begin() + 1);  // n2 died
  std::vector<Member> next = AssignNextRanks(survivors, {Named("x9"), Named("a1")});
  EXPECT_EQ(NamesOf(next), (std::vector<std::string>{"n0", "n3", "a1", "x9"}));
  for (size_t i = 0; i < next.size(); ++i) EXPECT_EQ(next[i].rank, static_cast<int>(i));
}

TEST(ControlMembershipTest, DescribeListsMembersInRankOrder) {
  MembershipView v;
  v.epoch = 2;
  v.members = AssignInitialRanks({Named("node0"), Named("node2"), Named("node5")});
  EXPECT_EQ(v.Describe(), "epoch 2: members node0 node2 node5");
  v.departed = {1, 3};
  v.joined = {"node5"};
  EXPECT_EQ(v.Describe(), "epoch 2: members node0 node2 node5 (departed ranks 1,3; joined node5)");
  ASSERT_NE(v.Find("node2"), nullptr);
  EXPECT_EQ(v.Find("node2")->rank, 1);
  EXPECT_EQ(v.Find("node9"), nullptr);
}

TEST(ControlMembershipTest, LivenessGoesSuspectThenDeadAndRecovers) {
  using std::chrono::milliseconds;
  LivenessTable table(milliseconds(500), milliseconds(1000));
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  table.Reset({"a", "b"}, t0);
  EXPECT_TRUE(table.Check(t0 + milliseconds(400)).empty());

  auto events = table.Check(t0 + milliseconds(600));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].change, LivenessTable::Change::kSuspect);
  EXPECT_TRUE(table.IsSuspect("a"));
  EXPECT_TRUE(table.Check(t0 + milliseconds(700)).empty()) << "suspect is reported once";

  table.Heard("a", t0 + milliseconds(750));
  events = table.Check(t0 + milliseconds(800));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "a");
  EXPECT_EQ(events[0].change, LivenessTable::Change::kRecovered);

  events = table.Check(t0 + milliseconds(1000));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "b");
  EXPECT_EQ(events[0].change, LivenessTable::Change::kDead);
  EXPECT_DOUBLE_EQ(events[0].silent_s, 1.0);
  EXPECT_TRUE(table.IsDead("b"));
  // Dead is final: a late frame does not bring it back.
  table.Heard("b", t0 + milliseconds(1100));
  EXPECT_TRUE(table.IsDead("b"));
  EXPECT_FALSE(table.IsDead("a"));
  EXPECT_FALSE(table.IsDead("unknown"));
}

TEST(ControlMembershipTest, HeardAllForgivesAStallOfThisNode) {
  using std::chrono::milliseconds;
  LivenessTable table(milliseconds(500), milliseconds(1000));
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  table.Reset({"a"}, t0);
  table.HeardAll(t0 + milliseconds(5000));  // we were suspended for 5 s
  EXPECT_TRUE(table.Check(t0 + milliseconds(5100)).empty());
  EXPECT_FALSE(table.IsSuspect("a"));
}

TEST(ControlMembershipTest, RefusedDialsAfterALostConnectionDeclareDeathBeforeTheTimeout) {
  using std::chrono::milliseconds;
  LivenessTable table(milliseconds(2000), milliseconds(5000));
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  table.Reset({"a", "b", "c"}, t0);

  // A refusal counts only once the connection closed.
  table.DialRefused("a");
  table.DialRefused("a");
  EXPECT_FALSE(table.IsLost("a"));
  EXPECT_TRUE(table.Check(t0 + milliseconds(100)).empty());

  // a: lost, then refused twice in a row: dead long before 5 s of silence.
  table.ConnectionLost("a");
  EXPECT_TRUE(table.IsLost("a"));
  table.DialRefused("a");
  EXPECT_TRUE(table.Check(t0 + milliseconds(600)).empty()) << "one refusal is not enough";
  table.DialRefused("a");
  auto events = table.Check(t0 + milliseconds(1100));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "a");
  EXPECT_EQ(events[0].change, LivenessTable::Change::kDead);
  EXPECT_EQ(events[0].refused_dials, LivenessTable::kRefusedDialsForDead);
  EXPECT_TRUE(table.IsDead("a"));
  EXPECT_FALSE(table.IsLost("a"));

  // b: a frame between the refusals (it answered on a new connection) starts
  // the count again; losing the connection again is needed to count anew.
  table.ConnectionLost("b");
  table.DialRefused("b");
  table.Heard("b", t0 + milliseconds(1200));
  EXPECT_FALSE(table.IsLost("b"));
  table.DialRefused("b");
  table.DialRefused("b");
  EXPECT_TRUE(table.Check(t0 + milliseconds(1300)).empty());
  table.ConnectionLost("b");
  table.DialRefused("b");
  EXPECT_TRUE(table.Check(t0 + milliseconds(1400)).empty());

  // A view installed meanwhile keeps b's lost connection and its refusal.
  table.Reset({"b", "c"}, t0 + milliseconds(1500));
  EXPECT_TRUE(table.IsLost("b"));
  table.DialRefused("b");
  events = table.Check(t0 + milliseconds(1600));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "b");
  EXPECT_EQ(events[0].refused_dials, 2);

  // c was never lost: silence alone decides, 5 s after the view's reset.
  table.Check(t0 + milliseconds(6400));
  EXPECT_TRUE(table.IsSuspect("c"));
  events = table.Check(t0 + milliseconds(6500));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "c");
  EXPECT_EQ(events[0].change, LivenessTable::Change::kDead);
  EXPECT_EQ(events[0].refused_dials, 0);
}

// The coordinator's weighing of members that others declared dead.
struct Reports {
  std::map<std::string, DeathReport> by_name;
  Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  void Add(const std::string& name, const std::string& reporter, Duration after = {}) {
    auto [it, fresh] = by_name.try_emplace(name);
    if (fresh) it->second.first_at = t0 + after;
    it->second.reporters.insert(reporter);
  }
};

CoordinatorJudgement Hearing(std::set<std::string> silent = {}, std::set<std::string> lost = {},
                             Clock::time_point heard_since = {}) {
  CoordinatorJudgement judge;
  judge.silent_here = [silent](const std::string& name) { return silent.count(name) > 0; };
  judge.lost_here = [lost](const std::string& name) { return lost.count(name) > 0; };
  judge.heard_since = heard_since;
  judge.quorum = 2;
  judge.grace = std::chrono::seconds(2);
  return judge;
}

TEST(ControlMembershipTest, ADeathReportTheCoordinatorConfirmsDropsTheNamedMember) {
  Reports r;
  // Its connection here is lost too: the named member goes at once.
  r.Add("x", "a");
  std::vector<DeathVerdict> v = JudgeDeathReports(r.by_name, Hearing({}, {"x"}), r.t0);
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"x"});
  EXPECT_NE(v[0].why.find("declared dead by a, which ended this epoch's operations with it (its connection here"),
            std::string::npos)
      << v[0].why;
  EXPECT_TRUE(r.by_name.empty());
  // Silent here (a load spike can do that): it waits out the grace, then the named member goes if still silent.
  r.Add("x", "a");
  EXPECT_TRUE(JudgeDeathReports(r.by_name, Hearing({"x"}), r.t0 + std::chrono::seconds(1)).empty());
  v = JudgeDeathReports(r.by_name, Hearing({"x"}), r.t0 + std::chrono::seconds(2));
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"x"});
  EXPECT_NE(v[0].why.find("(silent here too)"), std::string::npos) << v[0].why;
}

TEST(ControlMembershipTest, ACoordinatorThatStalledListensAGraceFromItsStallAndTakesTheWordOnlyIfItKeepsStalling) {
  Reports r;
  r.Add("x", "a");
  // Stalled 1.5 s after the report: it cannot judge yet, and nobody goes at the report's grace.
  const Clock::time_point stall = r.t0 + std::chrono::milliseconds(1500);
  EXPECT_TRUE(JudgeDeathReports(r.by_name, Hearing({}, {}, stall), r.t0 + std::chrono::seconds(2)).empty());
  // A grace after its stall, having heard x all along: the reporter goes.
  std::vector<DeathVerdict> v = JudgeDeathReports(r.by_name, Hearing({}, {}, stall), stall + std::chrono::seconds(2));
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"a"});
  EXPECT_NE(v[0].why.find("heard for the 2 s since"), std::string::npos) << v[0].why;
  // Stalling again and again: after kStalledGraces graces it takes the word.
  r.Add("x", "a");
  const Duration late = kStalledGraces * std::chrono::seconds(2);
  EXPECT_TRUE(JudgeDeathReports(r.by_name, Hearing({}, {}, r.t0 + late - std::chrono::seconds(1)),
                                r.t0 + late - std::chrono::milliseconds(1))
                  .empty());
  v = JudgeDeathReports(r.by_name, Hearing({}, {}, r.t0 + late - std::chrono::seconds(1)), r.t0 + late);
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"x"});
  EXPECT_NE(v[0].why.find("kept stalling"), std::string::npos) << v[0].why;
}

TEST(ControlMembershipTest, OneMembersDeathReportWaitsThenRemovesItsReporterAndAQuorumRemovesTheNamed) {
  Reports r;
  r.Add("x", "a");
  const CoordinatorJudgement judge = Hearing();
  // Within the grace: nobody goes, and the report stays to be judged again.
  EXPECT_TRUE(JudgeDeathReports(r.by_name, judge, r.t0 + std::chrono::seconds(1)).empty());
  ASSERT_EQ(r.by_name.size(), 1u);
  // A second member's word within the grace confirms it.
  r.Add("x", "b");
  std::vector<DeathVerdict> v = JudgeDeathReports(r.by_name, judge, r.t0 + std::chrono::seconds(1));
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"x"});
  EXPECT_NE(v[0].why.find("declared dead by a, b,"), std::string::npos) << v[0].why;
  // Alone past the grace, with the named member heard all along: the reporter goes.
  r.Add("y", "a");
  v = JudgeDeathReports(r.by_name, judge, r.t0 + std::chrono::seconds(2));
  EXPECT_EQ(NamesOf(v), std::vector<std::string>{"a"});
  EXPECT_NE(v[0].why.find("it alone declared y dead"), std::string::npos) << v[0].why;
  EXPECT_TRUE(r.by_name.empty());
}

TEST(ControlMembershipTest, OfTwoMembersThatDeclaredEachOtherDeadOneGoes) {
  Reports r;
  r.Add("b", "c");
  r.Add("c", "b", std::chrono::milliseconds(300));
  const CoordinatorJudgement judge = Hearing();
  EXPECT_EQ(NamesOf(JudgeDeathReports(r.by_name, judge, r.t0 + std::chrono::milliseconds(2400))),
            std::vector<std::string>{"c"});
  // The other report is decided too: its reporter is the one condemned.
  EXPECT_TRUE(r.by_name.empty());
  // Judged at different times, the second report waits; the caller drops it once its named member is gone.
  r.Add("b", "c");
  r.Add("c", "b", std::chrono::seconds(1));
  EXPECT_EQ(NamesOf(JudgeDeathReports(r.by_name, judge, r.t0 + std::chrono::milliseconds(2500))),
            std::vector<std::string>{"c"});
  EXPECT_EQ(r.by_name.size(), 1u);
}

}  // namespace
}  // namespace chorus::node
