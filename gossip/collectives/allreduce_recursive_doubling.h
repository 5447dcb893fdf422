// AllreduceRecursiveDoubling: recursive doubling all-reduce of a float or FP16
// buffer (log2 n rounds, each a whole-buffer exchange with one partner), with the
// fold for a world size that is not a power of two. Meant for small buffers,
// where the number of message rounds, not the bytes, sets the time; correct for
// any length.
//
// Must not: see a transport implementation; allocate more than inflight_segments
// segments of scratch.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

// Sums `data` over the group in place (every member passes the same length and
// options), with options.pre_scale / post_scale. `half` holds IEEE binary16 bits.
// Every member ends with the same bits.
[[nodiscard]] Status AllreduceRecursiveDoubling(const CollectiveGroup& group,
                                                std::span<float> data,
                                                const AllreduceOptions& options);
[[nodiscard]] Status AllreduceRecursiveDoubling(const CollectiveGroup& group,
                                                std::span<uint16_t> half,
                                                const AllreduceOptions& options);

namespace detail {
// The sum alone (no hello, no scaling, no option checks): for composite algorithms.
template <typename T>
Status RecursiveDoublingSum(const CollectiveGroup& group, std::span<T> data,
                            const AllreduceOptions& options);
}  // namespace detail

}  // namespace chorus::gossip
