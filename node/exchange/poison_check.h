// A check of every member's contribution to a step's all-reduce, before the
// step's update is applied: what a member with a bug or bad intent sends
// (non-finite values, an update many times larger than the others') is named
// and not applied, and a member named in several steps in a row is accused
// (ControlPlane::Expel; expelled once cluster.expel_quorum members accuse it).
//
// Under all-reduce the sum hides who sent what, so each rank measures its own
// contribution before it enters the sum (FusionEngine::LastContribution) and
// the members gather those figures (one small direct all-gather per step,
// each member's figures from it alone): every rank judges the same figures
// and reaches the same verdict. A member could
// misreport its own figures; the sum then betrays that someone did (its norm
// above the sum of the reported norms, or non-finite with every report
// finite), and the step is not applied, though no one is named; the rest of
// the membership epoch's all-reduce is then audited, which names it
// (poison_audit.h).
//
// Rules (JudgeContributions), over n >= 3 reports (with 2, a disagreement
// cannot say which side is wrong, and the check is off):
//  - Non-finite contributions from fewer than half the members: those are
//    named. The sum is non-finite, so no member applies the step anyway (the
//    loss scaler's skip, which also lowers the loss scale: an honest
//    member's FP16 overflow, alone, is then gone by the next step, where a
//    poisoner is named again). When most members overflow, it is the loss
//    scale, not a member: nobody is named.
//  - A finite contribution whose norm per unit of weight (scaled_norm)
//    exceeds `norm_bound` times the median of the finite ones (at least 3 of
//    them): named, and the step abandoned on every member (no update; the
//    replicas stay equal).
//  - Before the outlier test, the weights that scale it: a member claiming
//    more samples than its share of the global batch is named (a member
//    overstating its samples to shrink its norm per sample); claims that sum
//    above the global batch abandon the step unattributed where the shares
//    are not known. The shares are the members' batches, or load
//    balancing's split of them, which every member computes alike; a member
//    may hold fewer (an epoch's last batch), never more.
//  - Otherwise a sum inconsistent with the reports: abandoned, unattributed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "gossip/fusion/fusion_engine.h"
#include "node/config/config.h"

namespace chorus::node {

class ControlPlane;

struct ContributionReport {
  double norm = 0;    // L2 norm of the member's contribution to the sum
  bool finite = true;
  // The norm the outlier test compares: the contribution per unit of the
  // member's weight (its samples this step under all-reduce, whose
  // contributions carry their batch share: at an epoch's end one member may
  // hold a full batch and another one sample); < 0: it contributed nothing.
  double scaled_norm = 0;
  // What the member says it weighs (its samples this step under all-reduce).
  double weight = 0;
};

// A figure for the verdicts' words: three significant digits ("%.3g").
std::string FigureText(double v);

// Two members' figures of the same values (norms, with their finite flags)
// agree: both finite within float rounding of the gathered norms (1e-5
// relative), or both non-finite. What the checks hold members' views of one
// sum, and the two ends of one message, to.
bool FiguresAgree(double a, bool a_finite, double b, bool b_finite);

struct PoisonVerdict {
  std::vector<int> offenders;  // ranks named, ascending
  bool abandon = false;        // no member may apply the step's update
  bool unattributed = false;   // the sum contradicts the reports; nobody named
  std::string why;             // for the log; empty when all is well
  // Of `offenders`, those an audit named alone for misstating what they sent
  // or received: both ends of a message measure the same bytes, so no honest
  // member does that once, and they are accused at once (PoisonLedger),
  // not after expel_after checks as an outlier is (an FP16 overflow names an
  // honest member once).
  std::vector<int> liars;
};

// Which check gathers the figures (live_state.h lists every tag range).
enum class CheckedSum { kGradients = 2, kPseudoGradients = 3, kSiteParameters = 5 };

// Every member's figures of one check, gathered (GatherFromEveryRank):
// reports by rank, and rank 0's view of the sum (norm, finite), the same on
// every rank.
struct GatheredFigures {
  std::vector<ContributionReport> reports;
  double sum_norm = 0;
  bool sum_finite = true;
  // Every rank's view of the sum, by rank (the same bits on every rank
  // unless a member altered what it forwarded or misreports its own).
  std::vector<double> sum_norms;
  std::vector<bool> sums_finite;
  // Ranks whose figures reached the members in copies no majority agreed on
  // (CheckRules::agree_up_to; their fields are NaN), the same on every honest rank.
  std::vector<int> equivocators;
  bool agreed = false;  // gathered in agreement (4 members or more, up to agree_up_to)
};

// The most the members may claim: each its share (`max_each`, by rank; empty:
// unknown), and all together `max_total` (the global batch under all-reduce;
// 0: unchecked).
struct WeightBounds {
  std::vector<double> max_each;
  double max_total = 0;
};

// What a check judges by, from the node's config.
struct CheckRules {
  double norm_bound = 100;  // exchange.poison_norm_bound
  WeightBounds bounds;
  int quorum = 2;  // cluster.expel_quorum
  // exchange.poison_agreement_up_to: up to this many members the figures
  // are gathered by Collective::AgreedAllgather, so that a member that sends
  // different figures to different members cannot make them judge it
  // differently (from 4 members, or 3 with signatures: unsigned, with 3 no
  // agreement tolerates a liar). Its second round costs each member n - 1 messages of
  // n times the first's figures, so it stops where that outweighs it.
  int agree_up_to = 32;
  // Fault injection (PoisonFault::equivocate): this member's norms reach
  // member k times 1 + 999 k.
  bool equivocate = false;
  // With per-node credentials, the session's signer of the parts
  // (ClusterSession::part_signer): the figures travel signed, and three
  // members agree too. Null without.
  const gossip::PartSigner* signer = nullptr;
  // Whether `collective`'s gathers run in agreement (from
  // Collective::kMinRanksForAgreement members, or kMinRanksForSignedAgreement
  // with a signer; below, one round).
  bool Agree(const gossip::Collective& collective) const {
    const int least = signer != nullptr ? gossip::Collective::kMinRanksForSignedAgreement
                                        : gossip::Collective::kMinRanksForAgreement;
    return collective.size() >= least && collective.size() <= agree_up_to;
  }
};

// norm_bound, quorum and agree_up_to as `config` sets them.
CheckRules CheckRulesFrom(const Config& config);

// `weight`: what the member's contribution is scaled by (ContributionReport::scaled_norm).
[[nodiscard]] Result<GatheredFigures> GatherFigures(const gossip::Collective& collective, uint64_t epoch,
                                                    CheckedSum which, const gossip::StepContribution& mine,
                                                    double weight, const CheckRules& rules, Deadline deadline);

// Members whose figures reached the others in differing copies (an honest
// member sends one copy to all): named, as liars (accused at once), and the
// step abandoned; an empty verdict for none.
PoisonVerdict JudgeEquivocators(std::span<const int> ranks);

// Whether the members' views of the sum agree: every all-reduce leaves the
// same sum on every rank, so a disagreement means a member altered what it
// forwarded (a ring's all-gather passes each chunk's total along) or
// misreports its view. Abandoned, unattributed (which of the two lied is not
// known: the audited path, which forwards nothing, settles it); an empty
// verdict when they agree.
PoisonVerdict JudgeSums(const GatheredFigures& figures);

// `reduced_norm`, `reduced_finite`: the all-reduced sum's (the same on every
// rank).
PoisonVerdict JudgeContributions(std::span<const ContributionReport> reports, double reduced_norm,
                                 bool reduced_finite, double norm_bound, const WeightBounds& bounds = {});

// Offences over a run, by member name: what summary.json reports, and who is
// expelled (named in `expel_after` checked steps in a row; 0: never).
class PoisonLedger {
 public:
  explicit PoisonLedger(int expel_after) : expel_after_(expel_after) {}
  // One checked step; `names` by rank. Returns the members to expel now
  // (once each).
  // `audited`: the step's all-reduce was audited (poison_audit.h);
  // `agreed`: its figures were gathered in agreement (GatheredFigures::agreed).
  std::vector<std::string> Record(const PoisonVerdict& verdict, std::span<const std::string> names,
                                  bool audited = false, bool agreed = false);
  // {"checked_steps", "rejected_steps", "unattributed_steps", "audited_steps", "agreed_steps",
  //  "named": {name: times named}, "expelled": [...]}
  // (a lone FP16 overflow names an honest member once; poison repeats).
  nlohmann::json Summary() const;

 private:
  const int expel_after_;
  int64_t checked_ = 0;
  int64_t rejected_ = 0;
  int64_t unattributed_ = 0;
  int64_t audited_ = 0;
  int64_t agreed_ = 0;
  std::map<std::string, int64_t> offences_;
  std::map<std::string, int> in_a_row_;
  std::set<std::string> expelled_;
};

// Logs a verdict that found something (naming the members of `names`, by
// rank, and `what` `index`: "step 12", "outer sync after step 40"), and
// expels each of `expel` (PoisonLedger::Record's) through `control` (may be
// null), this node excepted: it is told instead.
void ReportVerdict(const PoisonVerdict& verdict, const std::vector<std::string>& expel,
                   std::span<const std::string> names, int self_rank, int64_t index, const std::string& what,
                   int expel_after, ControlPlane* control);

// Fault injection for tests (docs/testing.md): CHORUS_FAULT_POISON="nan@S"
// or "xF@S" makes a node's contribution NaN, or F times its own, from step S
// on: a member with a bug or bad intent; "xF@S+claim" also claims F times its
// samples under all-reduce (to look like a member of a larger batch);
// "xF@S+lie" reports its contribution as it was before the factor (under
// all-reduce: its norm, and in audited steps what it sent each member);
// "xF@S+forward" sends its own contribution as it is, and F times each sum
// it forwards to the next member (sparse DiLoCo's ring all-gather);
// "nan@S+lie" sends NaN and reports a finite contribution of norm 0 (and in
// audited steps that it sent each member finite zeros); "+site" poisons what
// the node mixes inside its site (the outer exchange's inner average) and
// nothing else; "+equivocate" sends its check figures to member k with its
// norms times 1 + 999 k (CheckRules::equivocate) at every other check from
// step S on, so that no member names it in checks in a row as an outlier
// (its contribution is F times its own, honest at x1). Suffixes combine
// ("x1000@5+site+lie").
// nullopt when unset (or malformed, which is logged).
struct PoisonFault {
  bool nan = false;
  float factor = 1;
  bool claim = false;
  bool lie = false;
  bool forward = false;
  bool site = false;
  bool equivocate = false;
  int64_t from_step = 0;
  // A value of its own contribution (unchanged with `forward`).
  float Apply(float v) const;
  // With `equivocate`: whether this check (one from step S on) equivocates,
  // every other one; each call is a check.
  bool EquivocatesNow() { return equivocate && checks_++ % 2 == 0; }
  // `lie`: what rank `self` reports of its contribution, as it was before the
  // factor: its norm, and (audited) what it sent each member; with `nan`,
  // finite and of norm 0.
  void Misreport(int self, gossip::StepContribution* mine, gossip::AuditFigures* audit) const;

 private:
  int64_t checks_ = 0;
};
// The fault asked for this exchange: one with `site` for the average inside
// a site (inside_site), one without for everything else; nullopt otherwise.
std::optional<PoisonFault> PoisonFaultAsked(bool inside_site = false);

}  // namespace chorus::node
