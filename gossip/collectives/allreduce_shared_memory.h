// AllreduceSharedMemory: all-reduce of the ranks of one host through their
// HostSegment, with no message on the transport.
//
// Round by round (a round is at most slot_bytes of the buffer; slice i is the
// i-th n-th of it): every rank copies its round, but its own slice, into its
// slot (scaled by pre_scale) and posts; once all have posted, rank i sums slice
// i of every rank (its own from its buffer, the others' from their slots, in
// rank order) into its buffer and the result slot (scaled by post_scale) and
// finishes; once all have finished, every rank copies the other slices out.
// Two waits per round; each rank copies (n-1)/n of the round in and out, and
// reads n slices; every rank gets the same bits.
//
// Must not: see a transport implementation, or send on it.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/collectives/host_segment.h"

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
// index 0 copies the whole sum out (the others' `data` is left partly summed).
template <typename T>
Status SharedMemorySum(HostSegment& segment, std::span<T> data, Tag tag, Deadline deadline,
                       bool leader_only);
// Copies member `root`'s `data` to every member through the segment.
template <typename T>
Status SharedMemoryBroadcast(HostSegment& segment, std::span<T> data, int root, Tag tag,
                             Deadline deadline);
}  // namespace detail

}  // namespace chorus::gossip
