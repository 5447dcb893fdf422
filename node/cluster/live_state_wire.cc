// The live state's header and fingerprint (see live_state_wire.h).
#include "node/cluster/live_state_wire.h"

#include <cmath>
#include <cstring>
#include <string>

namespace chorus::node {
namespace {

constexpr uint32_t kLiveStateMagic = 0x534c4843;  // "CHLS"
constexpr uint32_t kLiveStateVersion = 1;

template <typename T>
void PutField(std::vector<uint8_t>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
}

template <typename T>
T FieldAt(std::span<const std::byte> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

// A 16-bit half of `v` as an exact float.
float HalfOf(uint64_t v, int shift) { return static_cast<float>((v >> shift) & 0xffff); }

}  // namespace

size_t LiveStateChunks(uint64_t bytes) {
  return static_cast<size_t>((bytes + kLiveStateChunkBytes - 1) / kLiveStateChunkBytes);
}

std::vector<uint8_t> EncodeLiveStateHeader(const LiveStateHeader& header) {
  std::vector<uint8_t> out(kLiveStateHeaderBytes);
  PutField(out, 0, kLiveStateMagic);
  PutField(out, 4, kLiveStateVersion);
  PutField(out, 8, header.bytes);
  PutField(out, 16, header.next_step);
  PutField(out, 24, header.crc32);
  PutField(out, 28, static_cast<uint32_t>(kLiveStateChunkBytes));
  return out;
}

Result<LiveStateHeader> DecodeLiveStateHeader(std::span<const std::byte> message) {
  if (message.size() != kLiveStateHeaderBytes) {
    return Err(DataLoss("live state header of " + std::to_string(message.size()) + " bytes, expected " +
                        std::to_string(kLiveStateHeaderBytes)));
  }
  const auto magic = FieldAt<uint32_t>(message, 0), version = FieldAt<uint32_t>(message, 4);
  const auto chunk_bytes = FieldAt<uint32_t>(message, 28);
  LiveStateHeader header{FieldAt<uint64_t>(message, 8), FieldAt<int64_t>(message, 16), FieldAt<uint32_t>(message, 24)};
  if (magic != kLiveStateMagic) return Err(DataLoss("live state header: magic " + std::to_string(magic) + " at byte 0"));
  if (version != kLiveStateVersion) {
    return Err(DataLoss("live state header: version " + std::to_string(version) + " at byte 4, expected " +
                        std::to_string(kLiveStateVersion)));
  }
  if (header.bytes > kMaxLiveStateBytes) {
    return Err(DataLoss("live state header: a state of " + std::to_string(header.bytes) +
                        " bytes (byte 8), above the limit of " + std::to_string(kMaxLiveStateBytes)));
  }
  if (chunk_bytes != kLiveStateChunkBytes) {
    return Err(DataLoss("live state header: chunks of " + std::to_string(chunk_bytes) + " bytes (byte 28), expected " +
                        std::to_string(kLiveStateChunkBytes)));
  }
  return header;
}

std::array<float, kLiveStateFingerprintFloats> EncodeLiveStateFingerprint(const LiveStateFingerprint& f) {
  if (!f.holds) return {};
  return {1.0f, HalfOf(f.crc32, 16), HalfOf(f.crc32, 0), HalfOf(f.bytes, 32), HalfOf(f.bytes, 16), HalfOf(f.bytes, 0)};
}

Result<LiveStateFingerprint> DecodeLiveStateFingerprint(std::span<const float> floats) {
  if (floats.size() != kLiveStateFingerprintFloats) {
    return Err(DataLoss("live state fingerprint of " + std::to_string(floats.size()) + " floats, expected " +
                        std::to_string(kLiveStateFingerprintFloats)));
  }
  uint64_t half[kLiveStateFingerprintFloats];
  for (size_t i = 0; i < floats.size(); ++i) {
    const float v = floats[i];
    // Checked before the cast: a float outside uint64_t's range does not convert.
    if (!(v >= 0.0f && v < 65536.0f) || std::trunc(v) != v) {
      return Err(DataLoss("live state fingerprint: float " + std::to_string(i) + " is " + std::to_string(v) +
                          ", not an integer in [0, 65536)"));
    }
    half[i] = static_cast<uint64_t>(v);
  }
  if (half[0] > 1) return Err(DataLoss("live state fingerprint: float 0 (holds) is " + std::to_string(half[0])));
  LiveStateFingerprint f;
  f.holds = half[0] == 1;
  f.crc32 = static_cast<uint32_t>((half[1] << 16) | half[2]);
  f.bytes = (half[3] << 32) | (half[4] << 16) | half[5];
  if (!f.holds && (f.crc32 != 0 || f.bytes != 0)) {
    return Err(DataLoss("live state fingerprint: a member that does not hold the state names a CRC or a size"));
  }
  if (f.bytes > kMaxLiveStateBytes) {
    return Err(DataLoss("live state fingerprint: a state of " + std::to_string(f.bytes) + " bytes, above the limit of " +
                        std::to_string(kMaxLiveStateBytes)));
  }
  return f;
}

}  // namespace chorus::node
