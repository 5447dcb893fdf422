// The contribution check of the average inside a site (the outer exchange's
// inner level, exchange.outer.inner = "site", and "site-gossip"'s exact
// averages before a sync).
//
// The average inside a site sums the members' parameters, and a member that
// sends a thousand times its own poisons its site's every replica at once,
// then the level across sites. Parameters are not what to check: a replica's
// norm hardly moves when its last step's update is a thousand times too
// large. Every member of a site holds the site's last average alike, so each
// sends its displacement from it instead (its update since; the same mean,
// last average + the mean displacement), and the displacements go through
// the check of an all-reduce step (poison_check.h, CheckStep over the site's
// members, with 3 or more of them): non-finite or outlier displacements name
// their sender, a sum that contradicts the reports audits the rest of the
// membership epoch's site averages (poison_audit.h), and any of these undoes
// the step on every member of the site (back to the last average). The first
// average of an epoch, when the members may not hold one last average yet,
// is a plain one.
//
// Must not: touch the trainer, report a verdict (the outer exchange names
// and expels), or run without a site of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "gossip/collectives/collective_options.h"
#include "node/exchange/poison_audit.h"
#include "node/exchange/poison_check.h"
#include "node/exchange/site_levels.h"

namespace chorus::node {

class SiteAverageCheck {
 public:
  struct Settings {
    bool check = true;          // exchange.poison_check
    CheckRules rules;           // CheckRulesFrom
    bool audit_always = false;  // exchange.poison_audit_always
    double op_timeout_s = 60.0;
  };
  // `fault`: fault injection (PoisonFaultAsked(true)), nullopt in production.
  SiteAverageCheck(const Settings& settings, std::optional<PoisonFault> fault)
      : settings_(settings), fault_(fault), audit_(settings.audit_always) {}

  // Averages `params` with this node's site (options: the algorithm, tags
  // and deadline; its scales are set here), each member's weighed by
  // `in_site` (SiteShares; 0: by member count), as SiteLevels::AverageInSite
  // does, checked as the file comment says. The check's figures and verdict,
  // its ranks the site's (SiteLevels::site_ranks); an empty verdict where
  // nothing was checked. Every member of the site calls it at the same step.
  // `signer`: the session's (ClusterSession::part_signer), null without credentials.
  [[nodiscard]] Result<StepCheck> Average(SiteLevels& levels, std::span<float> params,
                                          gossip::AllreduceOptions options, uint64_t epoch, int64_t step,
                                          double in_site = 0.0, const gossip::PartSigner* signer = nullptr);

 private:
  const Settings settings_;
  std::optional<PoisonFault> fault_;
  AuditSwitch audit_;
  std::vector<float> last_;  // the site's last average, alike on its members
  std::vector<float> next_;  // this step's displacement, then the next average
  uint64_t last_epoch_ = UINT64_MAX;
};

}  // namespace chorus::node
