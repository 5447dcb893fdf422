// SparseRingAllreduce: the sum of every rank's vector, each part sent through
// a lossy codec (top-k, random-k, sign, ...), with bytes per rank that do not
// grow with the number of ranks. Sending every rank's compressed vector to
// every other costs (n - 1) messages per rank; here the vector is cut into n
// chunks and
//   1. a ring reduce-scatter carries each chunk's partial sum once around the
//      ring: each rank decodes the sum it receives, adds its own part of that
//      chunk and encodes the result again for its successor (n - 1 messages
//      of a chunk's size), and
//   2. a ring all-gather carries each chunk's total, encoded once by the rank
//      that completed it, unchanged around the ring (n - 1 more).
// So a rank sends 2 (n - 1) messages of a chunk's size, about two messages of
// the whole vector's, at any n.
//
// Error feedback: whatever an encoding drops (the partial sum minus what its
// receiver decodes) is added to the residual of the rank that encoded it, so
//   sum over ranks of x_r == result + sum over ranks of (residual_r after)
// up to float rounding: nothing any codec dropped is lost, it travels in a
// later call from the rank that dropped it. Every rank decodes the same bytes
// for each chunk's total, so `result` is bitwise the same on every rank.
//
// Ranks are the transport's 0..n-1; rank r sends to r + 1 and receives from
// r - 1 (mod n). Tags: tag_base + 0 .. 2 (n - 1) - 1.
//
// Must not: allocate per element beyond two chunks' wire buffers and one
// decoded chunk, or reorder sums between ranks (each chunk's sum is formed
// along the ring in the same order everywhere).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/codecs/codec.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

struct SparseRingStats {
  uint64_t bytes_sent = 0;
  uint64_t messages_sent = 0;
  // Messages from the predecessor that decoded to non-finite values: taken
  // as zeros, so that the ring goes on (this rank's result then differs from
  // the ranks' before the sender; the caller must not use it as it is).
  // Without a stats object such a message fails the call instead.
  uint64_t nonfinite_received = 0;
};

// `x`: this rank's vector (error feedback already added: delta + residual);
// `residual`: set to what this rank's encodings dropped (its size is x's);
// `result`: the sum over the ranks, as decoded (x's size). `seed`: the
// codec's randomness for this call (mixed with the rank and the step).
// `alter_forwarded`: fault injection for tests, null otherwise: applied to
// each total this rank forwards in the all-gather (decoded, altered and
// encoded again), as a member that alters what it passes on would.
[[nodiscard]] Status SparseRingAllreduce(Transport& transport, const Codec& codec, std::span<const float> x,
                                         std::span<float> residual, std::span<float> result, Tag tag_base,
                                         uint64_t seed, Deadline deadline, SparseRingStats* stats = nullptr,
                                         const std::function<void(std::span<float>)>& alter_forwarded = {});

// The bytes one rank sends in SparseRingAllreduce of `n` elements over `ranks`.
uint64_t SparseRingBytesPerRank(const Codec& codec, size_t n, int ranks);

}  // namespace chorus::gossip
