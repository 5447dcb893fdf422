// AllreduceHierarchical: sum inside each host group to its leader (tree reduce),
// ring all-reduce among the leaders, then broadcast inside each group (tree).
// Fast links (shm) carry the intra-host steps; only leaders cross hosts.
//
// Must not: see a transport implementation or decide host groups itself (they
// come from the caller's host keys).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collective_group.h"
#include "gossip/collective_options.h"
#include "topologies/host_groups.h"

namespace chorus::gossip {

// Sums `data` over the group in place (every member passes the same length,
// options and `hosts`), with options.pre_scale / post_scale. `hosts` groups the
// group's indices (topologies::GroupByHost over one host key per member); each
// group's leader is its lowest index. `half` holds IEEE binary16 bits.
[[nodiscard]] Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                                           std::span<float> data,
                                           const AllreduceOptions& options);
[[nodiscard]] Status AllreduceHierarchical(const CollectiveGroup& group, const topologies::HostGroups& hosts,
                                           std::span<uint16_t> half,
                                           const AllreduceOptions& options);

}  // namespace chorus::gossip
