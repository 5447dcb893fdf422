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

}  // namespace chorus::topologies
