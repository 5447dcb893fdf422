// What a joiner reads of the live state's transfer (live_state.h) besides
// the state's own bytes (a checkpoint, trainer/checkpoint.h reads it): the
// header that precedes the chunks, and a holder's fingerprint of its state,
// which the holders gather (as floats, summed by an all-reduce) to plan a
// striped transfer. Each with its writer.
//
// The header, 32 bytes, little-endian (the hosts that run Chorus are):
//   [0..3] u32 magic "CHLS"  [4..7] u32 version 1  [8..15] u64 the state's bytes
//   [16..23] i64 the step to run next  [24..27] u32 CRC-32 of the bytes
//   [28..31] u32 the chunk size, kLiveStateChunkBytes
// The fingerprint, 6 floats, each an integer below 2^16: 1 (holds the state;
// all 0 for a member that does not), the CRC-32's high and low halves, and
// the size's bits 32-47, 16-31 and 0-15.
//
// Must not: check the CRC or the chunks (live_state.cc receives them), or
// pick tags.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace chorus::node {

// The bytes of one message of the transfer.
inline constexpr size_t kLiveStateChunkBytes = size_t{1} << 20;
// Larger than any model here by far; a header above it is corrupt, not a model.
inline constexpr uint64_t kMaxLiveStateBytes = uint64_t{64} << 30;
inline constexpr size_t kLiveStateHeaderBytes = 32;
inline constexpr size_t kLiveStateFingerprintFloats = 6;

struct LiveStateHeader {
  uint64_t bytes = 0;      // the state's size
  int64_t next_step = 0;   // the step the receiver runs next
  uint32_t crc32 = 0;      // of the state's bytes
};

// The chunks of a state of `bytes` bytes, the last one short.
size_t LiveStateChunks(uint64_t bytes);

std::vector<uint8_t> EncodeLiveStateHeader(const LiveStateHeader& header);

// The header in `message`, which must be exactly kLiveStateHeaderBytes;
// DataLoss naming the field for another size, magic, version or chunk size,
// or a size above kMaxLiveStateBytes. A header it accepts encodes back to the
// same bytes.
[[nodiscard]] Result<LiveStateHeader> DecodeLiveStateHeader(std::span<const std::byte> message);

struct LiveStateFingerprint {
  bool holds = false;  // false: crc32 and bytes are 0
  uint32_t crc32 = 0;
  uint64_t bytes = 0;
};

std::array<float, kLiveStateFingerprintFloats> EncodeLiveStateFingerprint(const LiveStateFingerprint& fingerprint);

// The fingerprint in `floats` (exactly kLiveStateFingerprintFloats); DataLoss
// naming the float for one that is not an integer in [0, 2^16), a first one
// other than 0 or 1, a non-holder's that is not all 0, or a size above
// kMaxLiveStateBytes. One it accepts encodes back to equal floats.
[[nodiscard]] Result<LiveStateFingerprint> DecodeLiveStateFingerprint(std::span<const float> floats);

}  // namespace chorus::node
