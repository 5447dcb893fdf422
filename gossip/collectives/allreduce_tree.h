// AllreduceTree: reduce up a tree to its root, broadcast back down, both
// pipelined by segment: up to AllreduceOptions::single_tree_max_bytes one tree
// (every rank a child of the root up to 4 ranks, else a binary tree), above it
// two binary trees (a double binary tree), each carrying half of the buffer. Also the tree reduce and tree broadcast steps that
// hierarchical all-reduce and Collective::Broadcast use.
//
// Must not: see a transport implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

// Sums `data` over the group in place (every member passes the same length and
// options), with options.pre_scale / post_scale. `half` holds IEEE binary16 bits.
[[nodiscard]] Status AllreduceTree(const CollectiveGroup& group, std::span<float> data,
                                   const AllreduceOptions& options);
[[nodiscard]] Status AllreduceTree(const CollectiveGroup& group, std::span<uint16_t> half,
                                   const AllreduceOptions& options);

namespace detail {

struct TreeParams {
  size_t segment_elems = 1;
  int inflight_segments = 1;
  Tag tag_base = 0;
  Deadline deadline = Deadline::Never();
};

// The steps alone (no hello, no scaling): for composite algorithms.
template <typename T>
Status TreeSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options);
// Sums every member's `data` into the one of group index `root` (the other
// members' buffers are clobbered).
template <typename T>
Status TreeReduceTo(const CollectiveGroup& group, std::span<T> data, int root,
                    const TreeParams& params);
// Copies the `data` of group index `root` to every member.
template <typename T>
Status TreeBroadcastFrom(const CollectiveGroup& group, std::span<T> data, int root,
                         const TreeParams& params);

}  // namespace detail

}  // namespace chorus::gossip
