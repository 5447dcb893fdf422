// The audited check of an all-reduce step: who sent what, measured by the
// members that received it, for when a member misreported its own figures.
//
// poison_check.h's check trusts each member's report of its own contribution
// and catches a lie only by its effect: the sum contradicts the reports, and
// the step is abandoned with nobody named. A member that lies every step
// would stall the cluster unnamed. So after such a step the all-reduce of
// the rest of the membership epoch runs audited
// (gossip/collectives/allreduce_audited.h): every member's chunk reaches the
// rank that sums it whole, every rank measures what it sent, received and
// summed, and the members gather those figures (about 6n floats per rank, a
// direct all-gather). Every rank judges the same figures (JudgeAudit):
//  - A message's figure as its sender gives it and as its receiver measured
//    it are of the same bytes: they differ only when one of the two lies. A
//    member at odds with `quorum` (cluster.expel_quorum, at least 2) or more
//    others is the liar and is named alone; any other pair at odds cannot
//    say which of the two lies, and both are named. So a liar that picks
//    victims takes them down with itself, never alone, and fewer than
//    `quorum` colluding members (the most the quorum tolerates) cannot frame
//    an honest member without being named with it.
//  - A summed chunk larger than the sum of its inputs' norms (5% for FP16
//    rounding), or non-finite from finite inputs, names the rank that summed it.
//  - Otherwise the contributions as measured, not as reported, go through
//    JudgeContributions: non-finite ones and outliers are named.
// Any of these abandons the step on every member, as poison_check.h does.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/exchange/poison_check.h"

namespace chorus::node {

// Every rank's AuditFigures of one step, by rank (the same on every rank).
// `which`: the check's tags (its range of GatherFigures', + 1 << 29).
// With `equivocators`, gathered in agreement (CheckRules::agree_up_to), and the
// ranks whose figures no majority of copies agreed on (or, with `signer`, no
// one signed copy) go there.
[[nodiscard]] Result<std::vector<gossip::AuditFigures>> GatherAudit(const gossip::Collective& collective,
                                                                    uint64_t epoch, CheckedSum which,
                                                                    const gossip::AuditFigures& mine,
                                                                    Deadline deadline,
                                                                    std::vector<int>* equivocators = nullptr,
                                                                    const gossip::PartSigner* signer = nullptr);

// `reports`: the step's gathered reports (GatherFigures), for each member's
// claimed weight; `figures`: GatherAudit's; `quorum`: cluster.expel_quorum.
// The rules are in the file comment.
PoisonVerdict JudgeAudit(std::span<const gossip::AuditFigures> figures, std::span<const ContributionReport> reports,
                         double norm_bound, const WeightBounds& bounds = {}, int quorum = 2);

// One check of a step's (or an outer sync's) contributions, as both exchanges
// run it: every member's figures gathered (GatherFigures), and with `audit`
// not empty every rank's AuditFigures too (GatherAudit); a member whose
// figures reached the others in differing copies is judged by
// JudgeEquivocators, else the figures by JudgeAudit where audited, else by
// JudgeContributions (the sum held to the reports) and, when that finds
// nothing, JudgeSums (the members' views of the sum agree).
struct StepCheck {
  GatheredFigures figures;
  PoisonVerdict verdict;
  bool audited = false;
};
[[nodiscard]] Result<StepCheck> CheckStep(const gossip::Collective& collective, uint64_t epoch, CheckedSum which,
                                          const gossip::StepContribution& mine, double weight,
                                          const gossip::AuditFigures& audit, const CheckRules& rules,
                                          Deadline deadline);

// For a mean every member applies as it lands (an outer sync's, a site
// average's, where no loss scaler skips a non-finite one): a named member
// or a non-finite mean abandons it, whoever sent it; `mean` names it in the
// verdict's words ("the mean pseudo-gradient").
void AbandonUnlessLandable(StepCheck& check, const std::string& mean);

// Which membership epoch's checks are audited: the rest of one in which a
// check found a misreport, or every one (exchange.poison_audit_always).
// Every member judged the same figures, so all switch at the same step.
// Thread-safe (the outer step checks on its helper thread).
class AuditSwitch {
 public:
  explicit AuditSwitch(bool always) : always_(always) {}
  bool On(uint64_t epoch) const { return always_ || epoch_.load() == epoch; }
  // After a check of `epoch` (`after`: "step 12"; `what`: what is audited):
  // an unattributed verdict audits the rest of the epoch. True when that
  // just turned it on (logged).
  bool Note(const PoisonVerdict& verdict, uint64_t epoch, const std::string& after, const std::string& what);

 private:
  const bool always_;
  std::atomic<uint64_t> epoch_{UINT64_MAX};
};

}  // namespace chorus::node
