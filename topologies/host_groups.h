// Host groups: ranks grouped by host for hierarchical collectives (reduce inside a
// host over shm, all-reduce among one leader per host over the network, broadcast
// back inside the host).
//
// Ranks with equal host keys form a group; the leader of a group is its lowest rank.
// Groups are numbered in the order of their leaders. Pure and std only: the host key
// (hostname, or a fabric address prefix) is chosen by node/.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::topologies {

struct HostGroups {
  std::vector<std::string> host_keys;    // [group] -> its key
  std::vector<std::vector<int>> members; // [group] -> ranks, ascending
  std::vector<int> leaders;              // [group] -> members[group].front()
  std::vector<int> group_of_rank;        // [rank] -> group
  std::vector<int> local_rank;           // [rank] -> position inside its group

  int NumGroups() const { return static_cast<int>(leaders.size()); }
  int LeaderOf(int rank) const { return leaders[group_of_rank[rank]]; }
  bool IsLeader(int rank) const { return LeaderOf(rank) == rank; }
};

// host_keys[r] is rank r's host. Fails on an empty list or an empty key (naming the rank).
Result<HostGroups> GroupByHost(const std::vector<std::string>& host_keys);

}  // namespace chorus::topologies
