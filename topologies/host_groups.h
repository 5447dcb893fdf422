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

// The ranks in link-aware order: each site's ranks together (sites in the
// order of their lowest rank), and inside a site each host's ranks together
// (hosts in the order of their lowest rank), ascending inside a host. A ring
// in this order crosses each site's boundary exactly twice (once out, once
// in) and each host's likewise; with one site and one host per rank it is
// 0..n-1. `site_keys[r]` and `host_keys[r]` are rank r's (same length). A
// host whose ranks name different sites is one host: it goes with the site of
// its lowest rank.
// Errors: as GroupByHost, or lengths that differ.
Result<std::vector<int>> LinkAwareOrder(const std::vector<std::string>& site_keys,
                                        const std::vector<std::string>& host_keys);

// How many edges of the ring `order` (order[i] sends to order[i+1], the last
// to the first) join ranks of different keys; 0 for fewer than two ranks.
int RingCrossings(const std::vector<int>& order, const std::vector<std::string>& keys);

}  // namespace chorus::topologies
