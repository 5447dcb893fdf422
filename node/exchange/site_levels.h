// SiteLevels: the two levels of an outer exchange whose nodes sit in sites
// (exchange.outer.inner = "site"): a fast exchange inside each cluster.site
// every inner step, and the outer step's average across sites.
//
// Inside a site: after every inner step each node's FP32 master weights are
// averaged with its site's over an all-reduce (the ring in link-aware
// order). With equal replicas before the step this is the step of the mean
// gradient for SGD with momentum (the update is linear in the gradient and
// the momentum); under LARS the per-layer trust ratio makes the two differ
// slightly. The replicas of a site stay equal.
//
// Across sites: the outer step's mean over every member. The members of a
// site hold equal parameters at a sync (AverageInSite ran after every step),
// so one representative per site (its lowest rank) all-reduces its site's
// parameters weighted by the site's size among the representatives, and
// broadcasts the mean inside its site: the slow links carry one copy per
// site. A representative that leaves is replaced at the re-form by the next
// lowest rank of its site; a site without members is no longer part of it.
//
// Must not: touch the trainer (the outer exchange passes the buffers).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/control/membership.h"

namespace chorus::node {

class SiteLevels {
 public:
  // The site collectives of `view` over `world` (a collective over every
  // member): collective, every member calls it at the same epoch.
  [[nodiscard]] static Result<SiteLevels> Build(const gossip::Collective& world, const MembershipView& view);

  // Averages `params` with this node's site (nothing alone in it); `options`
  // gives the algorithm, tags and deadline (its scales are set here).
  [[nodiscard]] Status AverageInSite(std::span<float> params, gossip::AllreduceOptions options);

  // `mean` holds this node's parameters (equal across its site) and gets the
  // mean over every member: among the representatives with `options` (its
  // scales set here), then broadcast inside each site at `broadcast_tag_base`
  // by options.deadline.
  [[nodiscard]] Status AverageAcrossSites(std::span<float> mean, gossip::AllreduceOptions options,
                                          gossip::Tag broadcast_tag_base) const;

  int sites() const { return sites_; }
  int site_size() const { return site_size_; }
  bool representative() const { return representatives_ != nullptr; }
  // "2 sites (this one: 4 nodes, represented by rank 0)".
  std::string Describe() const;
  // Counters for the metrics: averages inside the site and their seconds.
  nlohmann::json Metrics() const;

 private:
  std::shared_ptr<gossip::Collective> site_;             // null alone in the site
  std::shared_ptr<gossip::Collective> representatives_;  // null unless this node represents its site
  int sites_ = 1;
  int site_size_ = 1;
  int world_size_ = 1;
  gossip::Rank representative_ = 0;  // of this node's site
  uint64_t averages_ = 0;
  double average_seconds_ = 0.0;
};

}  // namespace chorus::node
