// JudgeContributions, JudgeSums and PoisonLedger on hand-made figures: who
// is named, when the step is abandoned, and who is expelled.
#include "node/exchange/poison_check.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <optional>

namespace chorus::node {
namespace {

std::vector<ContributionReport> Norms(std::initializer_list<double> norms) {
  std::vector<ContributionReport> out;
  for (double n : norms) out.push_back({n, true, n});
  return out;
}

GatheredFigures Sums(std::vector<double> norms, std::vector<bool> finite) {
  GatheredFigures f;
  f.sum_norms = std::move(norms);
  f.sums_finite = std::move(finite);
  return f;
}

TEST(PoisonCheckTest, MembersThatHoldDifferentSumsAbandonTheStepUnattributed) {
  // A few ulps apart (the buckets' norms summed in another order): agreed.
  EXPECT_FALSE(JudgeSums(Sums({2.0, 2.0 * (1 + 1e-7), 2.0, 2.0}, {true, true, true, true})).abandon);
  const PoisonVerdict v = JudgeSums(Sums({2.0, 2.0, 0.002, 0.002}, {true, true, true, true}));
  EXPECT_TRUE(v.abandon);
  EXPECT_TRUE(v.unattributed);
  EXPECT_TRUE(v.offenders.empty());
  EXPECT_NE(v.why.find("rank 2 0.002, rank 3 0.002"), std::string::npos) << v.why;
  EXPECT_TRUE(JudgeSums(Sums({2.0, 2.0, 2.0, 0.0}, {true, true, true, false})).abandon);
  // All non-finite (the loss scale overflowed): they agree; 2 members: no check.
  EXPECT_FALSE(JudgeSums(Sums({0.0, 0.0, 0.0}, {false, false, false})).abandon);
  EXPECT_FALSE(JudgeSums(Sums({1.0, 5.0}, {true, true})).abandon);
}

TEST(PoisonCheckTest, AnOutlierNormIsNamedAndTheStepAbandoned) {
  const auto reports = Norms({1.0, 1.3, 1000.0, 0.8});
  const PoisonVerdict v = JudgeContributions(reports, /*reduced_norm=*/250.0, true, /*norm_bound=*/10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({2}));
  EXPECT_TRUE(v.abandon);
  EXPECT_FALSE(v.unattributed);
  EXPECT_NE(v.why.find("rank 2"), std::string::npos) << v.why;
  // Unequal but honest members (a 4x larger batch) are not outliers.
  const PoisonVerdict honest = JudgeContributions(Norms({1.0, 4.0, 1.2, 0.9}), 1.5, true, 10.0);
  EXPECT_TRUE(honest.offenders.empty());
  EXPECT_FALSE(honest.abandon);
  EXPECT_TRUE(honest.why.empty());
  // No norm check when it is off.
  EXPECT_FALSE(JudgeContributions(reports, 250.0, true, 0.0).abandon);
}

// At an epoch's end one member may hold a full batch and another a sample or
// none: their weighted contributions differ by the batch share, their norms
// per sample do not.
TEST(PoisonCheckTest, TheOutlierTestComparesNormsPerUnitOfWeight) {
  std::vector<ContributionReport> reports = {{64.0, true, 1.0}, {1.0, true, 1.0}, {1.2, true, 1.2}, {0, true, -1}};
  const PoisonVerdict v = JudgeContributions(reports, 60.0, true, 10.0);
  EXPECT_TRUE(v.why.empty()) << v.why;
  reports[1].scaled_norm = 1000.0;  // the same raw norm, from a member claiming a 1000th of the weight
  EXPECT_EQ(JudgeContributions(reports, 60.0, true, 10.0).offenders, std::vector<int>({1}));
}

TEST(PoisonCheckTest, NonFiniteContributionsOfAMinorityAreNamedAndAMajorityIsTheLossScale) {
  auto reports = Norms({1.0, 1.0, 1.0, 1.0, 1.0});
  reports[3].finite = false;
  const PoisonVerdict v = JudgeContributions(reports, 0, /*reduced_finite=*/false, 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({3}));
  EXPECT_FALSE(v.abandon) << "the non-finite sum is skipped by every member's finite check already";
  reports[0].finite = false;
  reports[1].finite = false;
  reports[3].finite = false;  // 3 of 5 overflowed: the loss scale is too high
  const PoisonVerdict overflow = JudgeContributions(reports, 0, false, 10.0);
  EXPECT_TRUE(overflow.offenders.empty());
  EXPECT_FALSE(overflow.abandon);
  EXPECT_TRUE(overflow.why.empty());
}

TEST(PoisonCheckTest, ASumThatContradictsTheReportsIsAbandonedUnattributed) {
  const auto reports = Norms({1.0, 1.0, 1.0});
  EXPECT_FALSE(JudgeContributions(reports, 2.9, true, 10.0).abandon);  // |a + b + c| <= |a| + |b| + |c|
  const PoisonVerdict lie = JudgeContributions(reports, 400.0, true, 10.0);
  EXPECT_TRUE(lie.abandon);
  EXPECT_TRUE(lie.unattributed);
  EXPECT_TRUE(lie.offenders.empty());
  const PoisonVerdict nan = JudgeContributions(reports, 0, /*reduced_finite=*/false, 10.0);
  EXPECT_TRUE(nan.abandon);
  EXPECT_TRUE(nan.unattributed);
}

TEST(PoisonCheckTest, TwoMembersCannotTellWhichIsWrong) {
  auto reports = Norms({1.0, 1000.0});
  EXPECT_TRUE(JudgeContributions(reports, 500, true, 10.0).why.empty());
  reports[1].finite = false;
  EXPECT_TRUE(JudgeContributions(reports, 0, false, 10.0).why.empty());
}

// Four members of batch 16 (a global batch of 64). A poisoner sending 1000x
// its gradient and claiming 1000x its samples hides from the outlier test
// per sample; its claim above the whole global batch names it. One that
// claims only what keeps its claim under the batch (48 of 64) still pushes
// the claims' sum over it: the step is abandoned, unattributed.
TEST(PoisonCheckTest, ClaimedSamplesAboveTheGlobalBatchAreCaught) {
  std::vector<ContributionReport> reports;
  for (double norm : {1.0, 1.1, 0.9}) reports.push_back({norm, true, norm / 16, 16});
  reports.push_back({1000.0, true, 1000.0 / 16000, 16000});
  EXPECT_TRUE(JudgeContributions(reports, 900.0, true, 10.0).why.empty()) << "hidden without the batch";
  const PoisonVerdict named = JudgeContributions(reports, 900.0, true, 10.0, WeightBounds{{}, 64});
  EXPECT_EQ(named.offenders, std::vector<int>({3}));
  EXPECT_TRUE(named.abandon);
  EXPECT_FALSE(named.unattributed);
  EXPECT_NE(named.why.find("rank 3 claims 1.6e+04 samples of a global batch of 64"), std::string::npos)
      << named.why;
  reports[3] = {60.0, true, 60.0 / 48, 48};
  const PoisonVerdict over = JudgeContributions(reports, 60.0, true, 10.0, WeightBounds{{}, 64});
  EXPECT_TRUE(over.offenders.empty());
  EXPECT_TRUE(over.abandon);
  EXPECT_TRUE(over.unattributed);
  EXPECT_NE(over.why.find("claim 96 samples"), std::string::npos) << over.why;
  // Honest members at an epoch's end (fewer samples) or re-split by speed (same total).
  for (ContributionReport& r : reports) r = {1.0, true, 1.0 / 8, 8};
  reports[0] = {2.0, true, 2.0 / 40, 40};
  EXPECT_TRUE(JudgeContributions(reports, 2.5, true, 10.0, WeightBounds{{}, 64}).why.empty());
}

// With every member's share known, a member claiming more than its own is
// named although its claim is under the global batch (and its doubled update
// hides in the norm per sample): 4 members of 16, one claiming 32 with twice
// the gradient. By the total alone the step was only abandoned, unattributed,
// every step. Fewer than its share (an epoch's last batch) is honest.
TEST(PoisonCheckTest, AClaimAboveTheMembersShareNamesItUnderTheGlobalBatch) {
  std::vector<ContributionReport> reports;
  for (double norm : {1.0, 1.1, 0.9}) reports.push_back({norm, true, norm / 16, 16});
  reports.push_back({2.0, true, 2.0 / 32, 32});
  const PoisonVerdict total_only = JudgeContributions(reports, 3.0, true, 10.0, WeightBounds{{}, 64});
  EXPECT_TRUE(total_only.unattributed);
  EXPECT_TRUE(total_only.offenders.empty());
  const WeightBounds shares{{16, 16, 16, 16}, 64};
  const PoisonVerdict named = JudgeContributions(reports, 3.0, true, 10.0, shares);
  EXPECT_EQ(named.offenders, std::vector<int>({3}));
  EXPECT_TRUE(named.abandon);
  EXPECT_NE(named.why.find("rank 3 claims 32 samples of its share of 16"), std::string::npos) << named.why;
  reports[3] = {0.5, true, 0.5 / 8, 8};  // half a batch left at the epoch's end
  EXPECT_TRUE(JudgeContributions(reports, 2.0, true, 10.0, shares).why.empty());
  // Shares re-split by speed (load balancing): 40, 8, 8, 8 of 64.
  for (ContributionReport& r : reports) r = {1.0, true, 1.0 / 8, 8};
  reports[0] = {2.0, true, 2.0 / 40, 40};
  EXPECT_TRUE(JudgeContributions(reports, 2.5, true, 10.0, WeightBounds{{40, 8, 8, 8}, 64}).why.empty());
}

TEST(PoisonCheckTest, AMemberNamedInStepsInARowIsExpelledOnce) {
  PoisonLedger ledger(/*expel_after=*/3);
  const std::vector<std::string> names = {"node0", "node1", "node2"};
  PoisonVerdict named;
  named.offenders = {1};
  named.abandon = true;
  named.why = "x";
  const PoisonVerdict clean;
  EXPECT_TRUE(ledger.Record(named, names).empty());
  EXPECT_TRUE(ledger.Record(named, names).empty());
  EXPECT_TRUE(ledger.Record(clean, names).empty());  // the run is broken
  EXPECT_TRUE(ledger.Record(named, names).empty());
  EXPECT_TRUE(ledger.Record(named, names).empty());
  EXPECT_EQ(ledger.Record(named, names), std::vector<std::string>({"node1"}));
  EXPECT_TRUE(ledger.Record(named, names, /*audited=*/false, /*agreed=*/true).empty()) << "expelled once";
  const nlohmann::json s = ledger.Summary();
  EXPECT_EQ(s["checked_steps"], 7);
  EXPECT_EQ(s["agreed_steps"], 1);
  EXPECT_EQ(s["rejected_steps"], 6);
  EXPECT_EQ(s["named"]["node1"], 6);
  EXPECT_EQ(s["expelled"], nlohmann::json::array({"node1"}));
  PoisonLedger never(0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(never.Record(named, names).empty());
}

// A member an audit names alone for misstating what it sent lied (both
// ends of a message measure the same bytes): accused at its first naming.
// Whoever an audit names with another (a pair at odds) waits for its
// checks in a row like an outlier.
TEST(PoisonCheckTest, AMemberAnAuditFindsLyingIsExpelledAtOnce) {
  PoisonLedger ledger(/*expel_after=*/3);
  const std::vector<std::string> names = {"node0", "node1", "node2", "node3"};
  PoisonVerdict verdict;
  verdict.offenders = {0, 1, 3};
  verdict.liars = {3};
  verdict.abandon = true;
  verdict.why = "x";
  EXPECT_EQ(ledger.Record(verdict, names, /*audited=*/true), std::vector<std::string>({"node3"}));
  EXPECT_TRUE(ledger.Record(verdict, names, true).empty());
  EXPECT_EQ(ledger.Record(verdict, names, true), std::vector<std::string>({"node0", "node1"}));
  PoisonLedger never(0);
  EXPECT_TRUE(never.Record(verdict, names, true).empty());
}

TEST(PoisonCheckTest, EquivocatorsAreNamedAsLiarsAndTheStepAbandoned) {
  EXPECT_TRUE(JudgeEquivocators({}).why.empty());
  const std::vector<int> ranks = {1, 3};
  const PoisonVerdict v = JudgeEquivocators(ranks);
  EXPECT_EQ(v.offenders, ranks);
  EXPECT_EQ(v.liars, ranks);
  EXPECT_TRUE(v.abandon);
  EXPECT_FALSE(v.unattributed);
  EXPECT_NE(v.why.find("rank 1, rank 3 sent different figures"), std::string::npos) << v.why;
}

// CHORUS_FAULT_POISON: a value and a step, then suffixes in any order;
// anything else is ignored (logged), so that a typo injects nothing.
TEST(PoisonCheckTest, TheFaultSpecTakesItsSuffixesInAnyOrder) {
  auto asked = [](const char* spec, bool inside_site = false) {
    ::setenv("CHORUS_FAULT_POISON", spec, 1);
    std::optional<PoisonFault> f = PoisonFaultAsked(inside_site);
    ::unsetenv("CHORUS_FAULT_POISON");
    return f;
  };
  // A +site fault is the site average's alone, and only it.
  EXPECT_FALSE(asked("x1000@5+site+lie").has_value());
  EXPECT_FALSE(asked("x1000@5+lie", /*inside_site=*/true).has_value());
  std::optional<PoisonFault> f = asked("x1000@5+site+lie", /*inside_site=*/true);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->factor, 1000.0f);
  EXPECT_EQ(f->from_step, 5);
  EXPECT_TRUE(f->site && f->lie);
  EXPECT_FALSE(f->claim || f->forward || f->nan);
  f = asked("nan@7+lie");
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->nan && f->lie && !f->site);
  f = asked("x2@3+claim");
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->claim);
  f = asked("x1@3+equivocate");
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->equivocate && !f->lie);
  EXPECT_FALSE(asked("nan@7+claim").has_value());  // a claim scales samples: xF only
  EXPECT_FALSE(asked("x10@5+sight").has_value());
  EXPECT_FALSE(asked("x10@5 ").has_value());
  EXPECT_FALSE(asked("poison").has_value());
}

}  // namespace
}  // namespace chorus::node
