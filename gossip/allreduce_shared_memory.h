// AllreduceSharedMemory: all-reduce of the ranks of one host through their
// HostSegment, with no message on the transport.
//
// Round by round (a round is at most slot_bytes of the buffer): every rank
// copies its part into its own slot (scaled by pre_scale) and posts; once all
// have posted, rank i sums slice i of every slot, in slot order, into the result
// slot (scaled by post_scale) and finishes; once all have finished, every rank
// copies the result out. Two waits per round, every byte copied in once, read
// n times in total and copied out once per rank; every rank gets the same bits.
//
// Must not: see a transport implementation, or send on it.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collective_options.h"
#include "gossip/host_segment.h"

namespace chorus::gossip {

// Sums `data` over the segment's members in place (every member passes the
// same length and options, with options.pre_scale / post_scale). `half` holds
// IEEE binary16 bits, summed in FP32 and rounded after each addition.
[[nodiscard]] Status AllreduceSharedMemory(HostSegment& segment, std::span<float> data,
                                           const AllreduceOptions& options);
[[nodiscard]] Status AllreduceSharedMemory(HostSegment& segment, std::span<uint16_t> half,
                                           const AllreduceOptions& options);

namespace detail {
// The sum alone (no scaling) for composite algorithms; with `leader_only`, only
// index 0 copies the sum out (the others' `data` is left as it was).
template <typename T>
Status SharedMemorySum(HostSegment& segment, std::span<T> data, Tag tag, Deadline deadline,
                       bool leader_only);
// Copies member `root`'s `data` to every member through the segment.
template <typename T>
Status SharedMemoryBroadcast(HostSegment& segment, std::span<T> data, int root, Tag tag,
                             Deadline deadline);
}  // namespace detail

}  // namespace chorus::gossip
