// SiteLevels (see site_levels.h).
#include "node/exchange/site_levels.h"

#include <cstddef>

#include "node/exchange/allreduce_exchange.h"
#include "topologies/host_groups.h"

namespace chorus::node {

Result<SiteLevels> SiteLevels::Build(const gossip::Collective& world, const MembershipView& view) {
  CHORUS_ASSIGN_OR_RETURN(topologies::HostGroups sites, topologies::GroupByHost(SiteKeys(view, true)));
  SiteLevels levels;
  const int self = view.self_rank;
  const std::vector<int>& mine = sites.members[static_cast<size_t>(sites.group_of_rank[static_cast<size_t>(self)])];
  levels.sites_ = sites.NumGroups();
  levels.site_size_ = static_cast<int>(mine.size());
  levels.world_size_ = view.size();
  levels.representative_ = mine.front();
  if (mine.size() > 1) {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective site, world.Subgroup(std::vector<gossip::Rank>(mine.begin(), mine.end())));
    levels.site_ = std::make_shared<gossip::Collective>(std::move(site));
  }
  if (levels.representative_ == self && sites.NumGroups() > 1) {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective reps, world.Subgroup(std::vector<gossip::Rank>(
                                                         sites.leaders.begin(), sites.leaders.end())));
    levels.representatives_ = std::make_shared<gossip::Collective>(std::move(reps));
  }
  return levels;
}

Status SiteLevels::AverageInSite(std::span<float> params, gossip::AllreduceOptions options) {
  if (!site_) return Status::Ok();
  const int64_t start = NowMicros();
  options.pre_scale = 1.0f;
  options.post_scale = 1.0f / static_cast<float>(site_size_);
  Status s = site_->Allreduce(params, options);
  if (!s.ok()) return s.WithContext("average inside the site");
  ++averages_;
  average_seconds_ += static_cast<double>(NowMicros() - start) * 1e-6;
  return Status::Ok();
}

Status SiteLevels::AverageAcrossSites(std::span<float> mean, gossip::AllreduceOptions options,
                                      gossip::Tag broadcast_tag_base) const {
  if (representatives_) {
    // Each site's parameters count once per member: the mean over every member.
    options.pre_scale = static_cast<float>(site_size_) / static_cast<float>(world_size_);
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
  return {{"sites", sites_},
          {"site_size", site_size_},
          {"representative", representative()},
          {"site_averages", averages_},
          {"site_average_seconds", average_seconds_}};
}

}  // namespace chorus::node
