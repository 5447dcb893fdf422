// SiteAverageCheck over the in-process transport: four members of one site
// average their parameters after each step; the first average of an epoch
// is plain, later ones sum displacements from it and check them, and a
// member that sends a thousand times its displacement is named while the
// step is undone on every member; one that sends different figures to
// different members is named alike by all.
#include "node/exchange/site_average_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/gossip/gossip_test_util.h"

namespace chorus::node {
namespace {

constexpr int kMembers = 4;
constexpr size_t kParams = 40;

MembershipView OneSite(int self) {
  MembershipView view;
  view.epoch = 3;
  view.self_rank = self;
  for (int r = 0; r < kMembers; ++r) {
    Member m;
    m.rank = r;
    m.name = "node" + std::to_string(r);
    m.site = "a";
    view.members.push_back(m);
  }
  return view;
}

// Rank r's own update at a step: small, and different per rank.
float Update(int r, size_t i) { return 0.001f * static_cast<float>(r + 1) * (i % 2 == 0 ? 1.0f : -1.0f); }

struct Outcome {
  std::vector<float> params;
  PoisonVerdict first, clean, poisoned;
};

// Each rank: a plain average of its start, then one clean step, then one in
// which rank 3 (with `fault`) poisons its displacement.
std::vector<Outcome> RunThreeSteps(const PoisonFault& fault, const CheckRules& rules = {}) {
  std::vector<Outcome> out(kMembers);
  auto statuses = gossip::testing::RunRanks(kMembers, kMembers, [&](int r, gossip::Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective world, gossip::Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(SiteLevels levels, SiteLevels::Build(world, OneSite(r)));
    SiteAverageCheck check({true, rules, false, 30.0}, r == 3 ? std::optional<PoisonFault>(fault) : std::nullopt);
    std::vector<float> params(kParams);
    for (size_t i = 0; i < kParams; ++i) params[i] = static_cast<float>(i) + 0.5f * static_cast<float>(r);
    gossip::AllreduceOptions o;
    o.algorithm = gossip::AllreduceAlgorithm::kRing;
    o.deadline = Deadline::AfterSeconds(30);
    for (int64_t step = 0; step < 3; ++step) {
      o.tag_base = static_cast<gossip::Tag>(step + 1) << 24;
      if (step > 0) {
        for (size_t i = 0; i < kParams; ++i) params[i] += Update(r, i);
      }
      CHORUS_ASSIGN_OR_RETURN(StepCheck c, check.Average(levels, params, o, 3, step));
      (step == 0 ? out[r].first : step == 1 ? out[r].clean : out[r].poisoned) = c.verdict;
    }
    out[r].params = params;
    return Status::Ok();
  });
  for (int r = 0; r < kMembers; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  return out;
}

TEST(SiteAverageCheckTest, AMemberThatPoisonsItsDisplacementIsNamedAndTheStepUndone) {
  PoisonFault fault;
  fault.factor = 1000.0f;
  fault.site = true;
  fault.from_step = 2;
  const std::vector<Outcome> out = RunThreeSteps(fault);
  // After step 1 every member holds the start's mean plus the mean update;
  // step 2 is undone: the same parameters on every member.
  for (int r = 0; r < kMembers; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(out[r].first.why.empty());
    EXPECT_TRUE(out[r].clean.why.empty()) << out[r].clean.why;
    EXPECT_EQ(out[r].poisoned.offenders, std::vector<int>({3})) << out[r].poisoned.why;
    EXPECT_TRUE(out[r].poisoned.abandon);
    ASSERT_EQ(out[r].params.size(), kParams);
    for (size_t i = 0; i < kParams; ++i) {
      float mean_update = 0;
      for (int j = 0; j < kMembers; ++j) mean_update += Update(j, i) / kMembers;
      const float want = static_cast<float>(i) + 0.5f * 1.5f + mean_update;
      EXPECT_NEAR(out[r].params[i], want, 1e-5f) << "element " << i;
      EXPECT_EQ(out[r].params[i], out[0].params[i]) << "element " << i;
    }
  }
}

// A poisoner that reports the displacement it would have had: the sum
// contradicts the reports, the step is undone unattributed, and the next
// average is audited.
TEST(SiteAverageCheckTest, AMisreportUndoesTheStepUnattributed) {
  PoisonFault fault;
  fault.factor = 1000.0f;
  fault.site = true;
  fault.lie = true;
  fault.from_step = 2;
  const std::vector<Outcome> out = RunThreeSteps(fault);
  for (int r = 0; r < kMembers; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(out[r].poisoned.unattributed) << out[r].poisoned.why;
    EXPECT_TRUE(out[r].poisoned.abandon);
    EXPECT_EQ(out[r].params, out[0].params);
  }
}

// A member that contributes honestly but reports its norm to member k times
// 1 + 999 k: in one round, member 0 lands the step and members 1 and 2 undo
// it (their replicas part); in agreement every member names it a liar and
// undoes the step, and the replicas stay one.
TEST(SiteAverageCheckTest, AMemberThatSendsDifferentFiguresToEachIsNamedAlikeByAll) {
  PoisonFault fault;
  fault.site = true;
  fault.equivocate = true;
  fault.from_step = 2;
  CheckRules one_round;
  one_round.agree_up_to = 0;
  const std::vector<Outcome> split = RunThreeSteps(fault, one_round);
  EXPECT_FALSE(split[0].poisoned.abandon) << split[0].poisoned.why;
  EXPECT_TRUE(split[1].poisoned.abandon);
  EXPECT_NE(split[0].params, split[1].params);

  const std::vector<Outcome> out = RunThreeSteps(fault);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(out[r].poisoned.offenders, std::vector<int>({3})) << out[r].poisoned.why;
    EXPECT_EQ(out[r].poisoned.liars, std::vector<int>({3}));
    EXPECT_TRUE(out[r].poisoned.abandon);
    EXPECT_NE(out[r].poisoned.why.find("different figures"), std::string::npos) << out[r].poisoned.why;
    EXPECT_EQ(out[r].params, out[0].params);
  }
}

}  // namespace
}  // namespace chorus::node
