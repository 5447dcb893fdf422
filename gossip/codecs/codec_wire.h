// Internal to gossip/codec*.cc: the 16-byte header every codec message starts
// with, little-endian field helpers, and the constructors of the codec kinds that
// MakeCodec (codec.cc) calls.
//
// Header layout (byte offsets):
//   [0]      kCodecMagic (0xC7): a quick check that the bytes are a codec message
//   [1]      CodecKind
//   [2..3]   u16 parameter: int8 and sign store chunk - 1; top-k and random-k
//            the value width: 0 for 32-bit values (f32), 16 or 8; others 0
//   [4..7]   u32 reserved, must be 0
//   [8..15]  u64 element count n
//
// Must not: be included outside gossip/codec*.cc.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/codecs/codec.h"

namespace chorus::gossip::codec_wire {

static_assert(std::endian::native == std::endian::little,
              "codec wire format is little-endian; add byte swaps for this host");

inline constexpr uint8_t kCodecMagic = 0xC7;
inline constexpr size_t kHeaderBytes = 16;

struct Header {
  CodecKind kind = CodecKind::kNone;
  uint16_t param = 0;
  uint64_t n = 0;
};

template <typename T>
void Put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T>
T Get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

inline void WriteHeader(const Header& h, std::byte* out) {
  out[0] = static_cast<std::byte>(kCodecMagic);
  out[1] = static_cast<std::byte>(h.kind);
  Put<uint16_t>(out + 2, h.param);
  Put<uint32_t>(out + 4, 0);
  Put<uint64_t>(out + 8, h.n);
}

// Reads and checks the header: magic, kind == expected, reserved zero, and
// n == expected_n. Errors are kDataLoss naming the codec.
Result<Header> ReadHeader(std::span<const std::byte> bytes, CodecKind expected, size_t expected_n);

// kDataLoss unless bytes.size() == expected (names the codec and both sizes).
Status CheckSize(std::span<const std::byte> bytes, size_t expected, CodecKind kind);

// kDataLoss unless the header's chunk parameter (chunk - 1) is the decoder's
// chunk: sender and receiver quantize with one chunk length.
Status CheckChunk(const Header& h, size_t chunk, CodecKind kind);

// kDataLoss naming the first non-finite element of out, if any.
Status CheckFinite(std::span<const float> out, CodecKind kind);

// |x| with NaN ordered above +Inf, so that selections never see a NaN comparison.
inline float Magnitude(float x) { return std::isnan(x) ? INFINITY : std::fabs(x); }

std::unique_ptr<Codec> MakeNoneCodec();
std::unique_ptr<Codec> MakeFp16Codec();
std::unique_ptr<Codec> MakeInt8Codec(int chunk, bool stochastic_rounding);
std::unique_ptr<Codec> MakeSignCodec(int chunk);
std::unique_ptr<Codec> MakeTopKCodec(double ratio, int value_bits);
std::unique_ptr<Codec> MakeRandomKCodec(double ratio, int value_bits);

}  // namespace chorus::gossip::codec_wire
