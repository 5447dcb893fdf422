// Hierarchical all-reduce (see allreduce_hierarchical.h).
//
// `local` is this rank's host group (indices hosts.members[g], leader first) and
// `leaders` the group of every host's leader. Step 1: TreeReduceTo(local, root 0)
// leaves the host's sum at its leader. Step 2: the leaders run RingSum over
// `leaders`. Step 3: TreeBroadcastFrom(local, root 0) hands the result to every
// rank of the host. Steps use distinct tag phases (tree reduce, ring, tree
// broadcast) of options.tag_base, and the local groups are disjoint, so the
// messages of different steps and hosts never match each other.
#include "gossip/allreduce_hierarchical.h"

#include <string>

#include "gossip/allreduce_ring.h"
#include "gossip/allreduce_tree.h"
#include "gossip/collective_internal.h"

namespace chorus::gossip {

namespace {

template <typename T>
Status HierarchicalSum(const CollectiveGroup& group, const topologies::HostGroups& hosts, std::span<T> data,
                       const AllreduceOptions& options) {
  if (static_cast<int>(hosts.group_of_rank.size()) != group.size()) {
    return InvalidArgument("hierarchical all-reduce: " + std::to_string(hosts.group_of_rank.size()) +
                           " host keys for a group of " + std::to_string(group.size()));
  }
  if (group.size() == 1 || data.empty()) return Status::Ok();
  const auto& members = hosts.members[hosts.group_of_rank[group.self()]];
  CHORUS_ASSIGN_OR_RETURN(CollectiveGroup local, group.Sub(members));
  const detail::TreeParams params{options.segment_elems, options.inflight_segments,
                                  options.tag_base, options.deadline};

  Status s = detail::TreeReduceTo(local, data, /*root=*/0, params);
  if (!s.ok()) return s.WithContext("reduce inside the host");
  if (local.self() == 0 && hosts.NumGroups() > 1) {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup leaders, group.Sub(hosts.leaders));
    s = detail::RingSum(leaders, data, options);
    if (!s.ok()) return s.WithContext("ring among host leaders");
  }
  s = detail::TreeBroadcastFrom(local, data, /*root=*/0, params);
  if (!s.ok()) return s.WithContext("broadcast inside the host");
  return Status::Ok();
}

}  // namespace

Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                             std::span<float> data, const AllreduceOptions& options) {
  return detail::RunAllreduce(group, data, options, "hierarchical all-reduce",
                              [&] { return HierarchicalSum(group, hosts, data, options); });
}

Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                             std::span<uint16_t> half, const AllreduceOptions& options) {
  return detail::RunAllreduce(group, half, options, "hierarchical all-reduce (fp16)",
                              [&] { return HierarchicalSum(group, hosts, half, options); });
}

}  // namespace chorus::gossip
