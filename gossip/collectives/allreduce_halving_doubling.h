// AllreduceHalvingDoubling: recursive halving reduce-scatter and recursive doubling
// all-gather of a float or FP16 buffer, with the fold for a world size that is
// not a power of two; each exchange pipelined by segment.
//
// Must not: see a transport implementation; allocate more than inflight_segments
// segments of scratch per exchange.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

// Sums `data` over the group in place (every member passes the same length and
// options), with options.pre_scale / post_scale. `half` holds IEEE binary16 bits.
[[nodiscard]] Status AllreduceHalvingDoubling(const CollectiveGroup& group,
                                              std::span<float> data,
                                              const AllreduceOptions& options);
[[nodiscard]] Status AllreduceHalvingDoubling(const CollectiveGroup& group,
                                              std::span<uint16_t> half,
                                              const AllreduceOptions& options);

namespace detail {
// The sum alone (no hello, no scaling, no option checks): for composite algorithms.
template <typename T>
Status HalvingDoublingSum(const CollectiveGroup& group, std::span<T> data,
                          const AllreduceOptions& options);
}  // namespace detail

}  // namespace chorus::gossip
