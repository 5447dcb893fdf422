// GatherAudit and JudgeAudit (see poison_audit.h).
#include "node/exchange/poison_audit.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "common/log.h"
#include "node/cluster/live_state.h"

namespace chorus::node {
namespace {

// A figure crosses the gather as its norm (a sum of squares may not fit a
// float) and a finite flag; a non-finite message's norm is 0.
constexpr size_t kFloatsPerFigure = 2;
// What a member's summed chunk may exceed its inputs' norms by: FP16 on the
// wire rounds after every addition.
constexpr double kAuditSumSlack = 1.05;

void Put(const gossip::ChunkFigure& f, std::vector<float>& out) {
  out.push_back(f.finite ? static_cast<float>(std::sqrt(f.sumsq)) : 0.0f);
  out.push_back(f.finite ? 1.0f : 0.0f);
}

gossip::ChunkFigure Take(const float* in) {
  const double norm = in[0];
  return {norm * norm, in[1] > 0.5f};
}

// A sender's and its receiver's figure of one message measure the same
// bytes in the same order: only float rounding of the gathered norms.
bool Agree(const gossip::ChunkFigure& a, const gossip::ChunkFigure& b) {
  return FiguresAgree(std::sqrt(a.sumsq), a.finite, std::sqrt(b.sumsq), b.finite);
}

std::string Norm(double sumsq) { return FigureText(std::sqrt(sumsq)); }

std::string Describe(const gossip::ChunkFigure& f) { return f.finite ? "norm " + Norm(f.sumsq) : "non-finite"; }

// Members whose figures of a message disagree with the other end's. A
// member at odds with `alone` or more others is named alone; every other
// disputed pair names both ends.
PoisonVerdict JudgeDisputes(std::span<const gossip::AuditFigures> figures, size_t alone) {
  const int n = static_cast<int>(figures.size());
  std::vector<std::set<int>> partners(n);
  std::set<std::pair<int, int>> pairs;
  std::string detail;
  auto dispute = [&](int a, int b, const std::string& what) {
    partners[a].insert(b);
    partners[b].insert(a);
    pairs.emplace(std::min(a, b), std::max(a, b));
    if (detail.size() < 400) detail += (detail.empty() ? "" : "; ") + what;
  };
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < n; ++k) {
      if (j == k) continue;
      const gossip::ChunkFigure& said = figures[j].sent[k];
      const gossip::ChunkFigure& seen = figures[k].received[j];
      if (!Agree(said, seen)) {
        dispute(j, k, "rank " + std::to_string(j) + " says it sent rank " + std::to_string(k) + " " +
                          Describe(said) + ", which measured " + Describe(seen));
      }
      const gossip::ChunkFigure& summed = figures[k].summed;
      const gossip::ChunkFigure& got = figures[j].gathered[k];
      if (!Agree(summed, got)) {
        dispute(k, j, "rank " + std::to_string(k) + " says it sent its summed chunk with " + Describe(summed) +
                          ", rank " + std::to_string(j) + " measured " + Describe(got));
      }
    }
  }
  std::set<int> named_alone, offenders;
  for (int r = 0; r < n; ++r) {
    if (partners[r].size() >= alone) named_alone.insert(r);
  }
  offenders = named_alone;
  bool paired = false;
  for (const auto& [a, b] : pairs) {
    if (named_alone.count(a) || named_alone.count(b)) continue;
    offenders.insert(a);
    offenders.insert(b);
    paired = true;
  }
  PoisonVerdict verdict;
  if (offenders.empty()) return verdict;
  verdict.offenders.assign(offenders.begin(), offenders.end());
  verdict.liars.assign(named_alone.begin(), named_alone.end());
  verdict.abandon = true;
  if (!named_alone.empty()) {
    verdict.why = "at odds with " + std::to_string(alone) + " or more members over what it sent or received";
  }
  if (paired) {
    verdict.why += std::string(verdict.why.empty() ? "" : "; ") +
                   "pairs at odds over what passed between them (one of each pair lies, and fewer than " +
                   std::to_string(alone) + " members at odds with one cannot say which: both named)";
  }
  verdict.why += ": " + detail;
  return verdict;
}

// Members whose summed chunk exceeds what went into it.
PoisonVerdict JudgeSums(std::span<const gossip::AuditFigures> figures) {
  PoisonVerdict verdict;
  const int n = static_cast<int>(figures.size());
  for (int k = 0; k < n; ++k) {
    double bound = 0;
    bool inputs_finite = true;
    for (int r = 0; r < n; ++r) {
      bound += std::sqrt(figures[r].sent[k].sumsq);
      inputs_finite = inputs_finite && figures[r].sent[k].finite;
    }
    const gossip::ChunkFigure& summed = figures[k].summed;
    if ((inputs_finite && !summed.finite) || std::sqrt(summed.sumsq) > kAuditSumSlack * bound + 1e-30) {
      verdict.offenders.push_back(k);
      verdict.why += (verdict.why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(k) +
                     "'s summed chunk (" + Describe(summed) + ") exceeds its inputs (norms " +
                     Norm(bound * bound) + " in all)";
    }
  }
  verdict.abandon = !verdict.offenders.empty();
  return verdict;
}

}  // namespace

Result<std::vector<gossip::AuditFigures>> GatherAudit(const gossip::Collective& collective, uint64_t epoch,
                                                      CheckedSum which, const gossip::AuditFigures& mine,
                                                      Deadline deadline, std::vector<int>* equivocators,
                                                      const gossip::PartSigner* signer) {
  const size_t n = mine.sent.size();
  if (n != static_cast<size_t>(collective.size())) {
    return Err(Internal("audit figures of " + std::to_string(n) + " ranks for a collective of " +
                        std::to_string(collective.size())));
  }
  std::vector<float> row;
  row.reserve((3 * n + 1) * kFloatsPerFigure);
  for (size_t r = 0; r < n; ++r) {
    Put(mine.sent[r], row);
    Put(mine.received[r], row);
    Put(mine.gathered[r], row);
  }
  Put(mine.summed, row);
  const gossip::Tag tag =
      EpochTagBase(epoch) + (gossip::Tag{5} << 37) + (static_cast<gossip::Tag>(which) << 30) + (gossip::Tag{1} << 29);
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> all,
                          GatherFromEveryRank(collective, row, tag, deadline, equivocators, nullptr, signer));
  std::vector<gossip::AuditFigures> out(n);
  for (size_t r = 0; r < n; ++r) {
    const float* in = all.data() + r * row.size();
    gossip::AuditFigures& f = out[r];
    f.sent.resize(n);
    f.received.resize(n);
    f.gathered.resize(n);
    for (size_t k = 0; k < n; ++k, in += 3 * kFloatsPerFigure) {
      f.sent[k] = Take(in);
      f.received[k] = Take(in + kFloatsPerFigure);
      f.gathered[k] = Take(in + 2 * kFloatsPerFigure);
    }
    f.summed = Take(in);
  }
  return out;
}

PoisonVerdict JudgeAudit(std::span<const gossip::AuditFigures> figures, std::span<const ContributionReport> reports,
                         double norm_bound, const WeightBounds& bounds, int quorum) {
  const size_t n = figures.size();
  if (n < 3 || reports.size() != n) return {};
  for (const gossip::AuditFigures& f : figures) {
    if (f.sent.size() != n || f.received.size() != n || f.gathered.size() != n) return {};
  }
  PoisonVerdict verdict = JudgeDisputes(figures, static_cast<size_t>(std::max(2, quorum)));
  if (!verdict.abandon) verdict = JudgeSums(figures);
  if (!verdict.abandon) {
    // No figure is disputed: what each member says it sent is what was measured.
    std::vector<ContributionReport> measured(n);
    double sum_sumsq = 0;
    bool sum_finite = true;
    for (size_t r = 0; r < n; ++r) {
      gossip::ChunkFigure whole;
      for (size_t k = 0; k < n; ++k) whole.Add(figures[r].sent[k]);
      const double norm = std::sqrt(whole.sumsq);
      const double weight = reports[r].weight;
      measured[r] = {norm, whole.finite, weight > 0 && whole.finite ? norm / weight : -1.0, weight};
      sum_sumsq += figures[r].summed.sumsq;
      sum_finite = sum_finite && figures[r].summed.finite;
    }
    verdict = JudgeContributions(measured, std::sqrt(sum_sumsq), sum_finite, norm_bound, bounds);
  }
  if (!verdict.why.empty()) verdict.why = "audited step: " + verdict.why;
  return verdict;
}

Result<StepCheck> CheckStep(const gossip::Collective& collective, uint64_t epoch, CheckedSum which,
                            const gossip::StepContribution& mine, double weight, const gossip::AuditFigures& audit,
                            const CheckRules& rules, Deadline deadline) {
  StepCheck check;
  CHORUS_ASSIGN_OR_RETURN(check.figures, GatherFigures(collective, epoch, which, mine, weight, rules, deadline));
  std::vector<int>& equivocators = check.figures.equivocators;
  check.audited = !audit.empty();
  std::vector<gossip::AuditFigures> all;
  if (check.audited) {
    std::vector<int> in_audit;
    CHORUS_ASSIGN_OR_RETURN(all, GatherAudit(collective, epoch, which, audit, deadline,
                                             rules.Agree(collective) ? &in_audit : nullptr, rules.signer));
    equivocators.insert(equivocators.end(), in_audit.begin(), in_audit.end());
    std::sort(equivocators.begin(), equivocators.end());
    equivocators.erase(std::unique(equivocators.begin(), equivocators.end()), equivocators.end());
  }
  if (!equivocators.empty()) {
    check.verdict = JudgeEquivocators(equivocators);
    if (check.audited) check.verdict.why = "audited step: " + check.verdict.why;
  } else if (check.audited) {
    check.verdict = JudgeAudit(all, check.figures.reports, rules.norm_bound, rules.bounds, rules.quorum);
  } else {
    check.verdict = JudgeContributions(check.figures.reports, check.figures.sum_norm, check.figures.sum_finite,
                                       rules.norm_bound, rules.bounds);
    // Named offenders stand; otherwise members that disagree on the sum
    // abandon it (a member altered what it forwarded).
    if (check.verdict.offenders.empty() && !check.verdict.abandon) {
      if (PoisonVerdict sums = JudgeSums(check.figures); sums.abandon) check.verdict = sums;
    }
  }
  return check;
}

void AbandonUnlessLandable(StepCheck& check, const std::string& mean) {
  PoisonVerdict& verdict = check.verdict;
  verdict.abandon = verdict.abandon || !verdict.offenders.empty() || !check.figures.sum_finite;
  if (verdict.abandon && verdict.why.empty()) verdict.why = mean + " is not finite";
}

bool AuditSwitch::Note(const PoisonVerdict& verdict, uint64_t epoch, const std::string& after,
                       const std::string& what) {
  if (!verdict.unattributed || On(epoch)) return false;
  epoch_.store(epoch);
  CHORUS_LOG_WARN(Subsys::kGossip, "after ", after, ", the rest of epoch ", epoch, "'s ", what,
                  " audited: each member's contribution goes whole to the member that sums it, which measures it "
                  "(a member misreported its own)");
  return true;
}

}  // namespace chorus::node
