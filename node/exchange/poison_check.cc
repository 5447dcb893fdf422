// JudgeContributions and PoisonLedger (see poison_check.h).
#include "node/exchange/poison_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/log.h"
#include "node/cluster/live_state.h"
#include "node/control/control_plane.h"

namespace chorus::node {
namespace {

// How far the sum's norm may exceed the sum of the reported norms before a
// report is taken for a lie: FP16 on the wire rounds every partial sum.
constexpr double kSumSlack = 1.05;
// The weights are sample counts sent as floats: exact, but summed in double.
constexpr double kWeightSlack = 1.0 + 1e-6;

}  // namespace

std::string FigureText(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3g", v);
  return buffer;
}

Result<GatheredFigures> GatherFigures(const gossip::Collective& collective, uint64_t epoch, CheckedSum which,
                                      const gossip::StepContribution& c, double weight, const CheckRules& rules,
                                      Deadline deadline) {
  const float scaled = weight > 0 && c.finite ? static_cast<float>(c.norm / weight) : -1.0f;
  const float mine[6] = {c.finite ? static_cast<float>(c.norm) : 0.0f,
                         c.finite ? 1.0f : 0.0f,
                         scaled,
                         c.reduced_finite ? static_cast<float>(c.reduced_norm) : 0.0f,
                         c.reduced_finite ? 1.0f : 0.0f,
                         static_cast<float>(weight)};
  const gossip::Tag tag =
      EpochTagBase(epoch) + (gossip::Tag{5} << 37) + (static_cast<gossip::Tag>(which) << 30);
  GatheredFigures out;
  out.agreed = rules.Agree(collective);
  gossip::Collective::PartFor bend;
  if (rules.equivocate) {  // fault injection: the norms (fields 0 and 2) differ by destination
    bend = [](int dest, std::span<float> part) {
      for (size_t i : {size_t{0}, size_t{2}}) part[i] *= 1.0f + 999.0f * static_cast<float>(dest);
    };
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> all,
                          GatherFromEveryRank(collective, mine, tag, deadline,
                                              out.agreed ? &out.equivocators : nullptr, bend, rules.signer));
  const size_t n = all.size() / 6;
  out.reports.resize(n);
  for (size_t r = 0; r < n; ++r) out.reports[r] = {all[6 * r], all[6 * r + 1] > 0.5f, all[6 * r + 2], all[6 * r + 5]};
  out.sum_norm = all[3];
  out.sum_finite = all[4] > 0.5f;
  for (size_t r = 0; r < n; ++r) {
    out.sum_norms.push_back(all[6 * r + 3]);
    out.sums_finite.push_back(all[6 * r + 4] > 0.5f);
  }
  return out;
}

CheckRules CheckRulesFrom(const Config& config) {
  CheckRules rules;
  rules.norm_bound = config.exchange.poison_norm_bound;
  rules.quorum = config.cluster.expel_quorum;
  rules.agree_up_to = config.exchange.poison_agreement_up_to;
  return rules;
}

PoisonVerdict JudgeEquivocators(std::span<const int> ranks) {
  PoisonVerdict verdict;
  if (ranks.empty()) return verdict;
  verdict.offenders.assign(ranks.begin(), ranks.end());
  verdict.liars = verdict.offenders;
  verdict.abandon = true;
  for (int r : ranks) verdict.why += (verdict.why.empty() ? "rank " : ", rank ") + std::to_string(r);
  verdict.why += " sent different figures to different members (no majority of the copies the members relayed "
                 "agrees)";
  return verdict;
}

bool FiguresAgree(double a, bool a_finite, double b, bool b_finite) {
  constexpr double kAgreement = 1e-5;
  if (a_finite != b_finite) return false;
  return !a_finite || std::fabs(a - b) <= kAgreement * std::max(std::fabs(a), std::fabs(b));
}

PoisonVerdict JudgeSums(const GatheredFigures& figures) {
  PoisonVerdict verdict;
  const size_t n = figures.sum_norms.size();
  if (n < 3 || figures.sums_finite.size() != n) return verdict;
  // The same sum everywhere; its norm is summed bucket by bucket in the
  // order the buckets complete, which may differ by rank: a few float ulps.
  std::string differ;
  for (size_t r = 1; r < n; ++r) {
    const double b = figures.sum_norms[r];
    if (!FiguresAgree(figures.sum_norms[0], figures.sums_finite[0], b, figures.sums_finite[r])) {
      differ += (differ.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " " +
                (figures.sums_finite[r] ? FigureText(b) : "non-finite");
    }
  }
  if (differ.empty()) return verdict;
  verdict.abandon = true;
  verdict.unattributed = true;
  verdict.why = "the members hold different sums (rank 0 " +
                (figures.sums_finite[0] ? FigureText(figures.sum_norms[0]) : std::string("non-finite")) + "; " +
                differ + "): a member altered what it forwarded or misreports its own";
  return verdict;
}

// The members' claimed weights against the most they can hold (WeightBounds):
// a claim above its member's share, or above the whole batch, names that
// member; a total above the batch abandons the step unattributed. Empty when
// all is well.
PoisonVerdict JudgeWeights(std::span<const ContributionReport> reports, const WeightBounds& bounds) {
  PoisonVerdict verdict;
  const double max_total = bounds.max_total;
  const bool shares = bounds.max_each.size() == reports.size();
  if (max_total <= 0 && !shares) return verdict;
  double total = 0;
  for (size_t r = 0; r < reports.size(); ++r) {
    total += std::max(0.0, reports[r].weight);
    const double most = shares ? bounds.max_each[r] : max_total;
    if (reports[r].weight > most * kWeightSlack) {
      verdict.offenders.push_back(static_cast<int>(r));
      verdict.why += (verdict.why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " claims " +
                     FigureText(reports[r].weight) + " samples of " +
                     (shares ? "its share of " + FigureText(most) : "a global batch of " + FigureText(max_total));
    }
  }
  if (!verdict.offenders.empty()) {
    verdict.why += shares && max_total > 0 ? " (global batch " + FigureText(max_total) + ")" : "";
  } else if (max_total > 0 && total > max_total * kWeightSlack) {
    verdict.unattributed = true;
    verdict.why = "the members claim " + FigureText(total) + " samples of a global batch of " + FigureText(max_total) +
                  ": a member overstated its samples";
  }
  verdict.abandon = !verdict.why.empty();
  return verdict;
}

PoisonVerdict JudgeContributions(std::span<const ContributionReport> reports, double reduced_norm,
                                 bool reduced_finite, double norm_bound, const WeightBounds& bounds) {
  PoisonVerdict verdict;
  const size_t n = reports.size();
  if (n < 3) return verdict;
  std::vector<int> nonfinite;
  std::vector<double> norms;  // scaled, of the members that contributed
  double total = 0;
  for (size_t r = 0; r < n; ++r) {
    if (!reports[r].finite || !std::isfinite(reports[r].norm)) {
      nonfinite.push_back(static_cast<int>(r));
    } else {
      if (reports[r].scaled_norm >= 0) norms.push_back(reports[r].scaled_norm);
      total += reports[r].norm;
    }
  }
  if (!nonfinite.empty()) {
    if (2 * nonfinite.size() < n) {
      verdict.offenders = nonfinite;
      verdict.why = "non-finite values from " + std::to_string(nonfinite.size()) + " of " + std::to_string(n) +
                    " members (an FP16 overflow of their own once, poison if it repeats)";
    }
    return verdict;  // the sum is non-finite: no member applies it
  }
  // A member's weight scales its norm for the outlier test: checked first.
  if (PoisonVerdict weights = JudgeWeights(reports, bounds); weights.abandon) return weights;
  if (norm_bound > 0 && norms.size() >= 3) {
    std::vector<double> sorted = norms;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    for (size_t r = 0; r < n && median > 0; ++r) {
      const double scaled = reports[r].scaled_norm;
      if (reports[r].finite && scaled > norm_bound * median) {
        verdict.offenders.push_back(static_cast<int>(r));
        if (!verdict.why.empty()) verdict.why += "; ";
        verdict.why += "rank " + std::to_string(r) + "'s update norm " + FigureText(scaled) + " is " +
                       FigureText(scaled / median) + "x the median " + FigureText(median);
      }
    }
    if (!verdict.offenders.empty()) {
      verdict.why += " (bound " + FigureText(norm_bound) + "x)";
      verdict.abandon = true;
      return verdict;
    }
  }
  if (!reduced_finite || reduced_norm > kSumSlack * total + 1e-30) {
    verdict.abandon = true;
    verdict.unattributed = true;
    verdict.why = "the sum (norm " + FigureText(reduced_norm) + (reduced_finite ? "" : ", non-finite") +
                  ") contradicts the norms the members reported (" + FigureText(total) +
                  " in all): a member misreported its contribution";
  }
  return verdict;
}

std::vector<std::string> PoisonLedger::Record(const PoisonVerdict& verdict, std::span<const std::string> names,
                                              bool audited, bool agreed) {
  ++checked_;
  if (audited) ++audited_;
  if (agreed) ++agreed_;
  if (verdict.abandon || !verdict.offenders.empty()) ++rejected_;
  if (verdict.unattributed) ++unattributed_;
  std::set<std::string> named;
  for (int r : verdict.offenders) {
    if (r >= 0 && r < static_cast<int>(names.size())) named.insert(names[r]);
  }
  for (auto it = in_a_row_.begin(); it != in_a_row_.end();) {
    it = named.count(it->first) ? std::next(it) : in_a_row_.erase(it);
  }
  std::set<std::string> liars;
  for (int r : verdict.liars) {
    if (r >= 0 && r < static_cast<int>(names.size())) liars.insert(names[r]);
  }
  std::vector<std::string> expel;
  for (const std::string& name : named) {
    ++offences_[name];
    int& row = ++in_a_row_[name];
    if (liars.count(name)) row = std::max(row, expel_after_);
    if (expel_after_ > 0 && row >= expel_after_ && expelled_.insert(name).second) expel.push_back(name);
  }
  return expel;
}

nlohmann::json PoisonLedger::Summary() const {
  nlohmann::json named = nlohmann::json::object();
  for (const auto& [name, n] : offences_) named[name] = n;
  return {{"checked_steps", checked_},
          {"rejected_steps", rejected_},
          {"unattributed_steps", unattributed_},
          {"audited_steps", audited_},
          {"agreed_steps", agreed_},
          {"named", named},
          {"expelled", std::vector<std::string>(expelled_.begin(), expelled_.end())}};
}

void ReportVerdict(const PoisonVerdict& verdict, const std::vector<std::string>& expel,
                   std::span<const std::string> names, int self_rank, int64_t index, const std::string& what,
                   int expel_after, ControlPlane* control) {
  if (verdict.why.empty()) return;
  std::string who;
  for (int r : verdict.offenders) who += (who.empty() ? "" : ", ") + names[r] + " (rank " + std::to_string(r) + ")";
  CHORUS_LOG_WARN(Subsys::kNode, what, " ", index, ": ", who.empty() ? "" : "rejected the contribution of " + who + ": ",
                  verdict.why, verdict.abandon ? "; not applied on any member" : "");
  for (const std::string& name : expel) {
    const bool lied = std::any_of(verdict.liars.begin(), verdict.liars.end(), [&](int r) {
      return r >= 0 && r < static_cast<int>(names.size()) && names[r] == name;
    });
    const std::string reason =
        lied ? "it misstated what it sent or received in an audited check"
             : "its contributions were rejected " + std::to_string(expel_after) + " times in a row";
    if (self_rank >= 0 && self_rank < static_cast<int>(names.size()) && name == names[self_rank]) {
      CHORUS_LOG_ERROR(Subsys::kNode, "this node is expelled: ", reason);
    }
    if (control != nullptr) control->Expel(name, reason + " (last: " + verdict.why + ")");
  }
}

float PoisonFault::Apply(float v) const {
  if (forward) return v;
  return nan ? std::numeric_limits<float>::quiet_NaN() : v * factor;
}

void PoisonFault::Misreport(int self, gossip::StepContribution* mine, gossip::AuditFigures* audit) const {
  if (nan) {
    *mine = {0.0, true, mine->reduced_norm, mine->reduced_finite};
    for (gossip::ChunkFigure& sent : audit->sent) sent = {};
  }
  const double f = factor != 0 ? std::fabs(factor) : 1.0;
  mine->norm /= f;
  for (gossip::ChunkFigure& sent : audit->sent) sent.sumsq /= f * f;
  if (!audit->empty() && self >= 0 && self < static_cast<int>(audit->sent.size())) {
    audit->received[self] = audit->sent[self];
  }
}

std::optional<PoisonFault> PoisonFaultAsked(bool inside_site) {
  const char* text = std::getenv("CHORUS_FAULT_POISON");
  if (text == nullptr) return std::nullopt;
  PoisonFault p;
  double factor = 0;
  long long step = 0;
  int end = 0;
  bool known = false;
  if (std::sscanf(text, "nan@%lld%n", &step, &end) == 1) {
    p.nan = known = true;
  } else if (end = 0; std::sscanf(text, "x%lf@%lld%n", &factor, &step, &end) == 2) {
    p.factor = static_cast<float>(factor);
    known = true;
  }
  // The suffixes, each "+name", in any order: +claim and +forward with xF only.
  for (std::string_view rest = known ? std::string_view(text + end) : ""; known && !rest.empty();) {
    const size_t next = rest.find('+', 1);
    const std::string_view flag = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    if (flag == "+lie") {
      p.lie = true;
    } else if (flag == "+site") {
      p.site = true;
    } else if (flag == "+equivocate") {
      p.equivocate = true;
    } else if (flag == "+claim" && !p.nan) {
      p.claim = true;
    } else if (flag == "+forward" && !p.nan) {
      p.forward = true;
    } else {
      known = false;
    }
  }
  if (!known) {
    CHORUS_LOG_WARN(Subsys::kNode, "CHORUS_FAULT_POISON=", text,
                    " is neither nan@STEP[+lie][+site][+equivocate] nor "
                    "xFACTOR@STEP[+claim|+lie|+forward][+site][+equivocate]: ignored");
    return std::nullopt;
  }
  if (p.site != inside_site) return std::nullopt;
  p.from_step = step;
  CHORUS_LOG_WARN(Subsys::kNode, "fault injection: this node poisons what it contributes from step ", step, " (",
                  text, ")");
  return p;
}

}  // namespace chorus::node
