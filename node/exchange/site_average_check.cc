// SiteAverageCheck (see site_average_check.h).
#include "node/exchange/site_average_check.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace chorus::node {

Result<StepCheck> SiteAverageCheck::Average(SiteLevels& levels, std::span<float> params,
                                            gossip::AllreduceOptions options, uint64_t epoch, int64_t step,
                                            double in_site, const gossip::PartSigner* signer) {
  const gossip::Collective* site = levels.site();
  if (site == nullptr) return StepCheck{};
  const int n = levels.site_size();
  if (!settings_.check || n < 3 || last_epoch_ != epoch || last_.size() != params.size()) {
    CHORUS_RETURN_IF_ERROR(levels.AverageInSite(params, options, in_site));
    last_.assign(params.begin(), params.end());
    last_epoch_ = epoch;
    return StepCheck{};
  }
  // This member's displacement from the last average, in the mean's share.
  const bool poisons = fault_ && step >= fault_->from_step;
  std::vector<float>& moved = next_;
  moved.resize(params.size());
  double sumsq = 0;
  bool finite = true;
  for (size_t i = 0; i < params.size(); ++i) {
    float v = params[i] - last_[i];
    if (poisons) v = fault_->Apply(v);  // fault injection
    moved[i] = v;
    sumsq += static_cast<double>(v) * v;
    finite = finite && std::isfinite(v);
  }
  const double share = in_site > 0.0 ? in_site : 1.0 / n;
  options.pre_scale = static_cast<float>(share);
  options.post_scale = 1.0f;
  gossip::AuditFigures audit;
  CHORUS_RETURN_IF_ERROR(levels.SumInSite(moved, options, audit_.On(epoch) ? &audit : nullptr));
  // The mean displacement's figures, and the next average in its place.
  double reduced_sumsq = 0;
  bool reduced_finite = true;
  for (size_t i = 0; i < moved.size(); ++i) {
    const float v = moved[i];
    reduced_sumsq += static_cast<double>(v) * v;
    reduced_finite = reduced_finite && std::isfinite(v);
    moved[i] = last_[i] + v;
  }
  gossip::StepContribution mine{std::sqrt(sumsq) * share, finite, std::sqrt(reduced_sumsq), reduced_finite};
  if (poisons && fault_->lie) fault_->Misreport(site->rank(), &mine, &audit);  // fault injection
  CheckRules rules = settings_.rules;
  rules.signer = signer;
  rules.equivocate = poisons && fault_->EquivocatesNow();
  CHORUS_ASSIGN_OR_RETURN(StepCheck check,
                          CheckStep(*site, epoch, CheckedSum::kSiteParameters, mine, /*weight=*/share * n, audit, rules,
                                    Deadline::AfterSeconds(settings_.op_timeout_s)));
  AbandonUnlessLandable(check, "the site's mean displacement");
  const PoisonVerdict& verdict = check.verdict;
  if (verdict.abandon) {
    std::copy(last_.begin(), last_.end(), params.begin());  // the step undone on every member of the site
  } else {
    std::copy(moved.begin(), moved.end(), params.begin());
    last_.swap(moved);
  }
  (void)audit_.Note(verdict, epoch, "the site average after step " + std::to_string(step), "site averages are");
  return check;
}

}  // namespace chorus::node
