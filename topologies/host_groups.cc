// Host groups. See host_groups.h.
#include "topologies/host_groups.h"

#include <map>
#include <string>
#include <vector>

namespace chorus::topologies {

Result<HostGroups> GroupByHost(const std::vector<std::string>& host_keys) {
  if (host_keys.empty()) return Err(InvalidArgument("host groups: no ranks given"));
  HostGroups groups;
  std::map<std::string, int> group_by_key;
  const int n = static_cast<int>(host_keys.size());
  groups.group_of_rank.resize(n);
  groups.local_rank.resize(n);
  for (int r = 0; r < n; ++r) {  // ascending ranks: first seen is the leader
    const std::string& key = host_keys[r];
    if (key.empty()) {
      return Err(InvalidArgument("host groups: rank " + std::to_string(r) + " has an empty host key"));
    }
    auto [it, inserted] = group_by_key.emplace(key, groups.NumGroups());
    if (inserted) {
      groups.host_keys.push_back(key);
      groups.members.emplace_back();
      groups.leaders.push_back(r);
    }
    const int g = it->second;
    groups.group_of_rank[r] = g;
    groups.local_rank[r] = static_cast<int>(groups.members[g].size());
    groups.members[g].push_back(r);
  }
  return groups;
}

Result<std::vector<int>> LinkAwareOrder(const std::vector<std::string>& site_keys,
                                        const std::vector<std::string>& host_keys) {
  if (site_keys.size() != host_keys.size()) {
    return Err(InvalidArgument("link-aware order: " + std::to_string(site_keys.size()) + " site keys for " +
                               std::to_string(host_keys.size()) + " host keys"));
  }
  CHORUS_ASSIGN_OR_RETURN(HostGroups hosts, GroupByHost(host_keys));
  CHORUS_RETURN_IF_ERROR(StatusOf(GroupByHost(site_keys)));  // no empty site key
  std::vector<std::string> host_site;  // [host] -> the site of its lowest rank
  for (int leader : hosts.leaders) host_site.push_back(site_keys[static_cast<size_t>(leader)]);
  CHORUS_ASSIGN_OR_RETURN(HostGroups sites, GroupByHost(host_site));  // groups of hosts, by lowest rank
  std::vector<int> order;
  order.reserve(site_keys.size());
  for (const std::vector<int>& site_hosts : sites.members) {
    for (int h : site_hosts) order.insert(order.end(), hosts.members[h].begin(), hosts.members[h].end());
  }
  return order;
}

int RingCrossings(const std::vector<int>& order, const std::vector<std::string>& keys) {
  const size_t n = order.size();
  if (n < 2) return 0;
  int crossings = 0;
  for (size_t i = 0; i < n; ++i) {
    if (keys[static_cast<size_t>(order[i])] != keys[static_cast<size_t>(order[(i + 1) % n])]) ++crossings;
  }
  return crossings;
}

}  // namespace chorus::topologies
