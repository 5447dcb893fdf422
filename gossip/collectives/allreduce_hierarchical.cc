// Hierarchical all-reduce (see allreduce_hierarchical.h).
//
// `local` is this rank's host group (indices hosts.members[g], leader first) and
// `leaders` the group of every host's leader. Step 1: TreeReduceTo(local, root 0)
// leaves the host's sum at its leader. Step 2: the leaders run RingSum over
// `leaders`. Step 3: TreeBroadcastFrom(local, root 0) hands the result to every
// rank of the host. Steps use distinct tag phases (tree reduce, ring, tree
// broadcast) of options.tag_base, and the local groups are disjoint, so the
// messages of different steps and hosts never match each other. With the
// host's segment, steps 1 and 3 are SharedMemorySum (the sum copied out at the
// leader only) and SharedMemoryBroadcast from the leader.
#include "gossip/collectives/allreduce_hierarchical.h"

#include <string>

#include "gossip/collectives/allreduce_ring.h"
#include "gossip/collectives/allreduce_shared_memory.h"
#include "gossip/collectives/allreduce_tree.h"
#include "gossip/collectives/collective_internal.h"

namespace chorus::gossip {

namespace {

template <typename T>
Status HierarchicalSum(const CollectiveGroup& group, const topologies::HostGroups& hosts, std::span<T> data,
                       const AllreduceOptions& options, HostSegment* segment) {
  if (static_cast<int>(hosts.group_of_rank.size()) != group.size()) {
    return InvalidArgument("hierarchical all-reduce: " + std::to_string(hosts.group_of_rank.size()) +
                           " host keys for a group of " + std::to_string(group.size()));
  }
  if (group.size() == 1 || data.empty()) return Status::Ok();
  const auto& members = hosts.members[hosts.group_of_rank[group.self()]];
  CHORUS_ASSIGN_OR_RETURN(CollectiveGroup local, group.Sub(members));
  const detail::TreeParams params{options.segment_elems, options.inflight_segments,
                                  options.tag_base, options.deadline};

  if (segment != nullptr && segment->size() != local.size()) {
    return FailedPrecondition("hierarchical all-reduce: the host segment has " + std::to_string(segment->size()) +
                              " members, the host group " + std::to_string(local.size()));
  }
  const Tag reduce_tag = CollectiveTag(options.tag_base, CollectivePhase::kTreeReduce);
  const Tag broadcast_tag = CollectiveTag(options.tag_base, CollectivePhase::kTreeBroadcast);
  Status s = segment != nullptr
                 ? detail::SharedMemorySum(*segment, data, reduce_tag, options.deadline, /*leader_only=*/true)
                 : detail::TreeReduceTo(local, data, /*root=*/0, params);
  if (!s.ok()) return s.WithContext("reduce inside the host");
  if (local.self() == 0 && hosts.NumGroups() > 1) {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup leaders, group.Sub(hosts.leaders));
    s = detail::RingSum(leaders, data, options);
    if (!s.ok()) return s.WithContext("ring among host leaders");
  }
  s = segment != nullptr ? detail::SharedMemoryBroadcast(*segment, data, /*root=*/0, broadcast_tag, options.deadline)
                        : detail::TreeBroadcastFrom(local, data, /*root=*/0, params);
  if (!s.ok()) return s.WithContext("broadcast inside the host");
  return Status::Ok();
}

}  // namespace

Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                             std::span<float> data, const AllreduceOptions& options, HostSegment* segment) {
  return detail::RunAllreduce(group, data, options, "hierarchical all-reduce",
                              [&] { return HierarchicalSum(group, hosts, data, options, segment); });
}

Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                             std::span<uint16_t> half, const AllreduceOptions& options,
                             HostSegment* segment) {
  return detail::RunAllreduce(group, half, options, "hierarchical all-reduce (fp16)",
                              [&] { return HierarchicalSum(group, hosts, half, options, segment); });
}

}  // namespace chorus::gossip
