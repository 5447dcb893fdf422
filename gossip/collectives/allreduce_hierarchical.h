// AllreduceHierarchical: sum inside each host group to its leader (tree reduce),
// ring all-reduce among the leaders, then broadcast inside each group (tree).
// Fast links (shm) carry the intra-host steps; only leaders cross hosts. With
// the host's segment, the intra-host steps go through shared memory instead.
//
// Must not: see a transport implementation or decide host groups itself (they
// come from the caller's host keys).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/collectives/host_segment.h"
#include "topologies/host_groups.h"

namespace chorus::gossip {

// Sums `data` over the group in place (every member passes the same length,
// options and `hosts`), with options.pre_scale / post_scale. `hosts` groups the
// group's indices (topologies::GroupByHost over one host key per member); each
// group's leader is its lowest index. `half` holds IEEE binary16 bits.
// `segment`: this rank's host segment (its members are this rank's host group),
// or null.
[[nodiscard]] Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                                           std::span<float> data, const AllreduceOptions& options,
                                           HostSegment* segment = nullptr);
[[nodiscard]] Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                                           std::span<uint16_t> half, const AllreduceOptions& options,
                                           HostSegment* segment = nullptr);

}  // namespace chorus::gossip
