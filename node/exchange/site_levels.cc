// SiteLevels (see site_levels.h).
#include "node/exchange/site_levels.h"

#include <algorithm>
#include <cstddef>
#include <functional>

#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/gossip_tags.h"
#include "gossip/transport/subgroup_transport.h"
#include "node/exchange/allreduce_exchange.h"
#include "topologies/host_groups.h"

namespace chorus::node {

// The protocol holds the transport; both are kept for good together when the
// provider still holds the protocol's buffers.
struct SiteLevels::SiteGossip {
  std::unique_ptr<gossip::SubgroupTransport> transport;
  std::unique_ptr<gossip::DpsgdGossip> protocol;
};

Result<SiteLevels> SiteLevels::Build(const gossip::Collective& world, const MembershipView& view,
                                     const std::optional<SiteGossipSpec>& gossip) {
  CHORUS_ASSIGN_OR_RETURN(topologies::HostGroups sites, topologies::GroupByHost(SiteKeys(view, true)));
  SiteLevels levels;
  const int self = view.self_rank;
  const std::vector<int>& mine = sites.members[static_cast<size_t>(sites.group_of_rank[static_cast<size_t>(self)])];
  levels.sites_ = sites.NumGroups();
  levels.site_size_ = static_cast<int>(mine.size());
  levels.world_size_ = view.size();
  levels.self_ = self;
  levels.representative_ = mine.front();
  levels.site_ranks_ = mine;
  if (mine.size() > 1) {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective site, world.Subgroup(std::vector<gossip::Rank>(mine.begin(), mine.end())));
    levels.site_ = std::make_shared<gossip::Collective>(std::move(site));
    if (gossip) CHORUS_RETURN_IF_ERROR(levels.BuildGossip(world, mine, view.epoch, *gossip));
  }
  levels.gossip_inner_ = gossip.has_value();
  if (levels.representative_ == self && sites.NumGroups() > 1) {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective reps, world.Subgroup(std::vector<gossip::Rank>(
                                                         sites.leaders.begin(), sites.leaders.end())));
    levels.representatives_ = std::make_shared<gossip::Collective>(std::move(reps));
  }
  return levels;
}

Status SiteLevels::BuildGossip(const gossip::Collective& world, const std::vector<int>& site, uint64_t epoch,
                               const SiteGossipSpec& spec) {
  auto g = std::make_shared<SiteGossip>();
  CHORUS_ASSIGN_OR_RETURN(g->transport, gossip::SubgroupTransport::Create(
                                            world.transport(), std::vector<gossip::Rank>(site.begin(), site.end())));
  auto graph = topologies::MakeTopology(spec.topology, static_cast<int>(site.size()));
  const std::string kind(topologies::GraphKindName(spec.topology.kind));
  if (!graph) return graph.error().WithContext("topology." + kind + " inside a site of " + std::to_string(site.size()));
  gossip::DpsgdOptions o;
  o.tag_stream = gossip::kSiteGossipTagStream;
  o.epoch = static_cast<uint32_t>(epoch);
  o.seed = spec.seed;
  o.max_relative_distance = spec.max_relative_distance;
  auto protocol = gossip::DpsgdGossip::Create(*g->transport, std::move(*graph), o);
  if (!protocol) return protocol.error().WithContext("gossip inside the site");
  g->protocol = std::move(*protocol);
  gossip_ = std::move(g);
  return Status::Ok();
}

Status SiteLevels::MixInSite(std::span<float> params, int64_t step, Deadline deadline) {
  if (!gossip_) return Status::Ok();
  const int64_t start = NowMicros();
  Status s = gossip_->protocol->Mix(params, step, deadline);
  if (!s.ok()) return s.WithContext("gossip inside the site");
  gossip_seconds_ += static_cast<double>(NowMicros() - start) * 1e-6;
  return Status::Ok();
}

void SiteLevels::KeepUnreleasedBuffers() {
  if (gossip_) gossip::KeepWhileUnreleased(*gossip_->transport, gossip_);
}

SiteShares SiteLevels::SharesFrom(const std::vector<int>* shares) const {
  if (shares == nullptr || shares->size() != static_cast<size_t>(world_size_) ||
      std::adjacent_find(shares->begin(), shares->end(), std::not_equal_to<>()) == shares->end()) {
    return {};
  }
  int64_t total = 0, site = 0;
  for (int s : *shares) total += s;
  for (int r : site_ranks_) site += (*shares)[static_cast<size_t>(r)];
  if (total <= 0 || site <= 0) return {};
  return {static_cast<double>((*shares)[static_cast<size_t>(self_)]) / static_cast<double>(site),
          static_cast<double>(site) / static_cast<double>(total)};
}

Status SiteLevels::AverageInSite(std::span<float> params, gossip::AllreduceOptions options, double in_site) {
  if (!site_) return Status::Ok();
  const int64_t start = NowMicros();
  options.pre_scale = in_site > 0.0 ? static_cast<float>(in_site) : 1.0f;
  options.post_scale = in_site > 0.0 ? 1.0f : 1.0f / static_cast<float>(site_size_);
  Status s = site_->Allreduce(params, options);
  if (!s.ok()) return s.WithContext("average inside the site");
  ++averages_;
  average_seconds_ += static_cast<double>(NowMicros() - start) * 1e-6;
  return Status::Ok();
}

Status SiteLevels::SumInSite(std::span<float> values, const gossip::AllreduceOptions& options,
                             gossip::AuditFigures* audit) {
  if (!site_) return Status::Ok();
  const int64_t start = NowMicros();
  Status s = audit != nullptr ? site_->AuditedAllreduce(values, options, audit) : site_->Allreduce(values, options);
  if (!s.ok()) return s.WithContext("sum inside the site");
  ++averages_;
  average_seconds_ += static_cast<double>(NowMicros() - start) * 1e-6;
  return Status::Ok();
}

Status SiteLevels::AverageAcrossSites(std::span<float> mean, gossip::AllreduceOptions options,
                                      gossip::Tag broadcast_tag_base, double across) const {
  if (representatives_) {
    // Each site's parameters count once per member (or per sample): the mean
    // over every member.
    options.pre_scale = across > 0.0 ? static_cast<float>(across)
                                     : static_cast<float>(site_size_) / static_cast<float>(world_size_);
    options.post_scale = 1.0f;
    Status s = representatives_->Allreduce(mean, options);
    if (!s.ok()) return s.WithContext("outer average among the sites' representatives");
  }
  if (site_) {
    gossip::CollectiveOptions broadcast;
    broadcast.tag_base = broadcast_tag_base;
    broadcast.deadline = options.deadline;
    Status s = site_->Broadcast(std::as_writable_bytes(mean), representative_, broadcast);
    if (!s.ok()) return s.WithContext("outer average from the site's representative (rank " +
                                      std::to_string(representative_) + ")");
  }
  return Status::Ok();
}

std::string SiteLevels::Describe() const {
  return std::to_string(sites_) + " sites (this one: " + std::to_string(site_size_) + " nodes, represented by rank " +
         std::to_string(representative_) + ")";
}

nlohmann::json SiteLevels::Metrics() const {
  nlohmann::json m = {{"sites", sites_},
                      {"site_size", site_size_},
                      {"representative", representative()},
                      {"site_averages", averages_},
                      {"site_average_seconds", average_seconds_}};
  if (gossip_) {
    const gossip::GossipStats stats = gossip_->protocol->Stats();
    m["site_gossip_rounds"] = stats.mix_rounds;
    m["site_gossip_seconds"] = gossip_seconds_;
    m["site_gossip_rejected"] = stats.rejected_nonfinite + stats.rejected_outliers;
  }
  return m;
}

}  // namespace chorus::node
