// SiteLevels: the two levels of an outer exchange whose nodes sit in sites
// (exchange.outer.inner = "site" or "site-gossip"): a fast exchange inside
// each cluster.site every inner step, and the outer step's average across
// sites.
//
// Inside a site: after every inner step each node's FP32 master weights are
// averaged with its site's over an all-reduce (the ring in link-aware
// order). With equal replicas before the step this is the step of the mean
// gradient for SGD with momentum (the update is linear in the gradient and
// the momentum); under LARS the per-layer trust ratio makes the two differ
// slightly. The replicas of a site stay equal.
//
// Or gossip inside a site ("site-gossip"): each inner step mixes a node's
// parameters with its site neighbours' on a graph built over the site's
// members (D-PSGD: Metropolis-Hastings weights, or uniform ones on a regular
// directed graph such as the one-peer exponential graph, whose one message
// per node and step halves a ring all-reduce's bytes). No node waits for its
// whole site, only for its neighbours. The replicas of a site then differ
// between outer syncs; the outer exchange averages the site exactly
// (AverageInSite) at each step whose sync is due, so they are equal where
// the level across sites needs them to be.
//
// Across sites: the outer step's mean over every member. The members of a
// site hold equal parameters at a sync (AverageInSite ran after every step),
// so one representative per site (its lowest rank) all-reduces its site's
// parameters weighted by the site's size among the representatives, and
// broadcasts the mean inside its site: the slow links carry one copy per
// site. A representative that leaves is replaced at the re-form by the next
// lowest rank of its site; a site without members is no longer part of it.
//
// Where the members' shares of the global batch differ (train.balance, or
// unequal batch sizes), both levels weigh samples instead of members
// (SiteShares): a member's parameters count by its share of its site's
// samples inside the site, and a site's by its share of every sample across
// sites, so the two levels land the flat sample-weighted mean. Gossip inside
// a site mixes by its graph's weights, which know no shares.
//
// Must not: touch the trainer (the outer exchange passes the buffers).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/control/membership.h"
#include "topologies/topology_spec.h"

namespace chorus::gossip {
class DpsgdGossip;
class SubgroupTransport;
}  // namespace chorus::gossip

namespace chorus::node {

// Gossip inside each site: the graph's kind and shape (built for the site's
// size), the codec-less D-PSGD's seed and poison bound
// (GossipOptions::max_relative_distance; 0: none).
struct SiteGossipSpec {
  topologies::TopologySpec topology;
  uint64_t seed = 1;
  double max_relative_distance = 0.0;
};

// How one member's parameters count at the two levels: its share of its
// site's samples, and its site's share of every member's. 0: by member
// count (1 / site size, site size / members).
struct SiteShares {
  double in_site = 0.0;
  double across = 0.0;
};

class SiteLevels {
 public:
  // The site collectives of `view` over `world` (a collective over every
  // member), and with `gossip` the protocol inside the site: collective,
  // every member calls it at the same epoch. A graph that does not fit the
  // site's size, or a directed graph that is not regular, fails naming it.
  [[nodiscard]] static Result<SiteLevels> Build(const gossip::Collective& world, const MembershipView& view,
                                                const std::optional<SiteGossipSpec>& gossip = std::nullopt);

  // Mixes `params` with the site neighbours' (gossip round `step`; nothing
  // alone in the site). Only when built with a SiteGossipSpec.
  [[nodiscard]] Status MixInSite(std::span<float> params, int64_t step, Deadline deadline);
  bool gossips() const { return gossip_inner_; }
  // The provider still holds buffers of the site's gossip (Transport::
  // UnreleasedBuffers): they are kept for good. Call before dropping these
  // levels.
  void KeepUnreleasedBuffers();

  // The shares of this member and its site from every member's share of the
  // global batch by world rank (Exchange::SetMemberShares); by member count
  // (zeros) without them or where they are all equal, so that the sums stay
  // as they were bit for bit.
  SiteShares SharesFrom(const std::vector<int>* shares) const;

  // Averages `params` with this node's site (nothing alone in it), each
  // member's weighed by `in_site` (SiteShares); `options` gives the
  // algorithm, tags and deadline (its scales are set here).
  [[nodiscard]] Status AverageInSite(std::span<float> params, gossip::AllreduceOptions options,
                                     double in_site = 0.0);
  // Sums `values` over this node's site with `options` as given (its
  // pre_scale too), audited (Collective::AuditedAllreduce) when `audit` is
  // not null; counted as an average. Nothing alone in the site.
  [[nodiscard]] Status SumInSite(std::span<float> values, const gossip::AllreduceOptions& options,
                                 gossip::AuditFigures* audit);
  // The collective over this node's site (null alone in it), and the site's
  // members as ranks of the world, by their index in it.
  const gossip::Collective* site() const { return site_.get(); }
  const std::vector<int>& site_ranks() const { return site_ranks_; }

  // `mean` holds this node's parameters (equal across its site) and gets the
  // mean over every member: among the representatives with `options` (its
  // scales set here, each site's weighed by `across`, SiteShares), then
  // broadcast inside each site at `broadcast_tag_base` by options.deadline.
  [[nodiscard]] Status AverageAcrossSites(std::span<float> mean, gossip::AllreduceOptions options,
                                          gossip::Tag broadcast_tag_base, double across = 0.0) const;

  int sites() const { return sites_; }
  int site_size() const { return site_size_; }
  bool representative() const { return representatives_ != nullptr; }
  // "2 sites (this one: 4 nodes, represented by rank 0)".
  std::string Describe() const;
  // Counters for the metrics: averages inside the site and their seconds,
  // and the gossip's rounds, seconds and rejected neighbours.
  nlohmann::json Metrics() const;

 private:
  struct SiteGossip;  // the site's transport and the D-PSGD protocol over it
  [[nodiscard]] Status BuildGossip(const gossip::Collective& world, const std::vector<int>& site, uint64_t epoch,
                                   const SiteGossipSpec& spec);

  std::shared_ptr<gossip::Collective> site_;             // null alone in the site
  std::shared_ptr<SiteGossip> gossip_;                   // "site-gossip" with others in the site
  bool gossip_inner_ = false;                            // "site-gossip"
  std::shared_ptr<gossip::Collective> representatives_;  // null unless this node represents its site
  int sites_ = 1;
  int site_size_ = 1;
  int world_size_ = 1;
  int self_ = 0;                     // this node's world rank
  gossip::Rank representative_ = 0;  // of this node's site
  std::vector<int> site_ranks_;      // this node's site, as world ranks
  uint64_t averages_ = 0;
  double average_seconds_ = 0.0;
  double gossip_seconds_ = 0.0;
};

}  // namespace chorus::node
