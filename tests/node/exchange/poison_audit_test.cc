// JudgeAudit on hand-made figures of an audited all-reduce step: a member
// that misreports what it sent, one that misreports what it received, one
// that inflates the chunk it summed, and a measured outlier.
#include "node/exchange/poison_audit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace chorus::node {
namespace {

using gossip::AuditFigures;
using gossip::ChunkFigure;

// The figures every rank would give of a step in which rank j's chunk k has
// norm norms[j][k], every message arrived as sent, and each summed chunk has
// the norm of its inputs' sum if they were parallel (the largest it can be).
std::vector<AuditFigures> Honest(const std::vector<std::vector<double>>& norms) {
  const size_t n = norms.size();
  std::vector<AuditFigures> f(n);
  for (size_t j = 0; j < n; ++j) {
    f[j].sent.resize(n);
    f[j].received.resize(n);
    f[j].gathered.resize(n);
  }
  for (size_t k = 0; k < n; ++k) {
    double summed = 0;
    for (size_t j = 0; j < n; ++j) {
      const ChunkFigure c{norms[j][k] * norms[j][k], true};
      f[j].sent[k] = c;
      f[k].received[j] = c;
      summed += norms[j][k];
    }
    f[k].summed = {0.9 * summed * 0.9 * summed, true};
    for (size_t j = 0; j < n; ++j) f[j].gathered[k] = f[k].summed;
  }
  return f;
}

std::vector<ContributionReport> Weights(size_t n) { return std::vector<ContributionReport>(n, {0, true, 0, 1.0}); }

std::vector<std::vector<double>> Even(size_t n, double norm) {
  return std::vector<std::vector<double>>(n, std::vector<double>(n, norm));
}

TEST(PoisonAuditTest, AnHonestStepPasses) {
  const auto f = Honest({{1, 2, 1}, {1.5, 1, 1}, {1, 1, 2}});
  const PoisonVerdict v = JudgeAudit(f, Weights(3), 10.0);
  EXPECT_TRUE(v.why.empty()) << v.why;
  EXPECT_FALSE(v.abandon);
}

// The fault PoisonFault::lie: it sends 1000x and says it sent what it
// would have; every receiver measured the truth.
TEST(PoisonAuditTest, AMemberThatMisreportsWhatItSentIsNamedAlone) {
  auto norms = Even(4, 1.0);
  for (double& x : norms[2]) x *= 1000;
  auto f = Honest(norms);
  for (ChunkFigure& sent : f[2].sent) sent.sumsq /= 1e6;
  f[2].received[2] = f[2].sent[2];
  const PoisonVerdict v = JudgeAudit(f, Weights(4), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({2}));
  EXPECT_EQ(v.liars, std::vector<int>({2}));
  EXPECT_TRUE(v.abandon);
  EXPECT_FALSE(v.unattributed);
  EXPECT_NE(v.why.find("at odds with 2 or more members"), std::string::npos) << v.why;
}

// Without the lie, the measured norm is an outlier: named by measurement.
TEST(PoisonAuditTest, AMeasuredOutlierIsNamed) {
  auto norms = Even(4, 1.0);
  for (double& x : norms[1]) x *= 1000;
  const PoisonVerdict v = JudgeAudit(Honest(norms), Weights(4), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({1}));
  EXPECT_TRUE(v.abandon);
  EXPECT_NE(v.why.find("audited step"), std::string::npos) << v.why;
}

// A receiver that frames an honest sender disagrees with that sender only:
// a lone pair, both named (one of the two lies, and nobody can say which).
TEST(PoisonAuditTest, ALonePairAtOddsNamesBoth) {
  auto f = Honest(Even(4, 1.0));
  f[3].received[0].sumsq = 1e6;  // rank 3 says rank 0 sent it a huge chunk
  const PoisonVerdict v = JudgeAudit(f, Weights(4), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({0, 3}));
  EXPECT_TRUE(v.liars.empty());
  EXPECT_TRUE(v.abandon);
  EXPECT_NE(v.why.find("pair"), std::string::npos) << v.why;
  // Framing two senders makes the framer the one at odds with two.
  f[3].received[1].sumsq = 1e6;
  EXPECT_EQ(JudgeAudit(f, Weights(4), 10.0).offenders, std::vector<int>({3}));
}

// Receivers that collude to frame an honest sender, fewer than the quorum
// (cluster.expel_quorum 3 tolerates two lying members): each is at odds with
// the sender only, so every pair names both ends, and the framers are named
// with their victim. At the default quorum of 2 two framers are beyond what
// the quorum tolerates (they could expel anyone by their word alone), and
// the sender at odds with both is named alone.
TEST(PoisonAuditTest, ReceiversThatColludeBelowTheQuorumAreNamedWithTheSenderTheyFrame) {
  auto f = Honest(Even(5, 1.0));
  f[3].received[1].sumsq = 1e6;
  f[4].received[1].sumsq = 1e6;
  PoisonVerdict v = JudgeAudit(f, Weights(5), 10.0, {}, /*quorum=*/3);
  EXPECT_EQ(v.offenders, std::vector<int>({1, 3, 4}));
  EXPECT_TRUE(v.liars.empty());  // nobody is known to lie: no one is expelled at once
  EXPECT_TRUE(v.abandon);
  EXPECT_NE(v.why.find("both named"), std::string::npos) << v.why;
  EXPECT_EQ(JudgeAudit(f, Weights(5), 10.0, {}, /*quorum=*/2).offenders, std::vector<int>({1}));
  // A sender that lies to every receiver is at odds with four: named alone at either quorum.
  auto lie = Honest(Even(5, 1.0));
  for (int k = 0; k < 5; ++k) {
    if (k != 2) lie[2].sent[k].sumsq = 1e-6;
  }
  EXPECT_EQ(JudgeAudit(lie, Weights(5), 10.0, {}, /*quorum=*/3).offenders, std::vector<int>({2}));
  EXPECT_EQ(JudgeAudit(lie, Weights(5), 10.0, {}, /*quorum=*/4).offenders, std::vector<int>({2}));
}

// A member that sends others a summed chunk larger than its inputs allow
// (what it adds in is measured by everyone who received it).
TEST(PoisonAuditTest, ASummedChunkLargerThanItsInputsNamesItsOwner) {
  auto f = Honest(Even(5, 1.0));
  f[4].summed = {1e4, true};
  for (AuditFigures& g : f) g.gathered[4] = f[4].summed;
  PoisonVerdict v = JudgeAudit(f, Weights(5), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({4}));
  EXPECT_TRUE(v.abandon);
  // Non-finite from finite inputs, too.
  f[4].summed = {0, false};
  for (AuditFigures& g : f) g.gathered[4] = f[4].summed;
  v = JudgeAudit(f, Weights(5), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({4}));
  // A member that sends different summed chunks to different members is at
  // odds with those that got the other one.
  f = Honest(Even(5, 1.0));
  f[1].gathered[4] = {2e4, true};
  f[2].gathered[4] = {2e4, true};
  EXPECT_EQ(JudgeAudit(f, Weights(5), 10.0).offenders, std::vector<int>({4}));
}

TEST(PoisonAuditTest, ANonFiniteSenderIsNamedByWhatItSent) {
  auto f = Honest(Even(4, 1.0));
  f[1].sent[3] = {0, false};
  f[3].received[1] = f[1].sent[3];
  f[3].summed = {0, false};
  for (AuditFigures& g : f) g.gathered[3] = f[3].summed;
  const PoisonVerdict v = JudgeAudit(f, Weights(4), 10.0);
  EXPECT_EQ(v.offenders, std::vector<int>({1}));
}

TEST(PoisonAuditTest, TooFewMembersOrRaggedFiguresJudgeNothing) {
  auto f = Honest(Even(2, 1.0));
  f[0].received[1].sumsq = 1e6;
  EXPECT_TRUE(JudgeAudit(f, Weights(2), 10.0).why.empty());
  auto g = Honest(Even(3, 1.0));
  g[1].sent.pop_back();
  EXPECT_TRUE(JudgeAudit(g, Weights(3), 10.0).why.empty());
}

}  // namespace
}  // namespace chorus::node
