// The sign codec: one bit per element and one f32 scale per chunk (codec.h).
//
// Payload: ceil(n / chunk) f32 scales, scale_c = mean_{i in chunk c} |x_i|
// (accumulated in double, in 8 partial sums), then ceil(n / 8) bytes of sign
// bits, element i in bit i % 8 of byte i / 8, set when x_i is negative (std::signbit, so -0 counts as
// negative); the unused high bits of the last byte are 0. Decoding gives
// x_i = +-scale_c. Per chunk, ||x - Q(x)||^2 = ||x||^2 - ||x||_1^2 / chunk, so Q is
// a contraction (what CHOCO-gossip needs).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <string>

#include "gossip/codecs/codec_wire.h"
#include "kernels/vector_clones.h"

namespace chorus::gossip::codec_wire {
namespace {

// sum_i |x_i| in double, in 8 partial sums so that it vectorises; a NaN
// counts as infinite (Magnitude): the NaN the sum then is becomes +Inf, the
// sum a NaN-free chunk with an infinity has.
CHORUS_VECTOR_CLONES double MagnitudeSum(const float* x, size_t count) {
  constexpr size_t kLanes = 8;
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(std::fabs(x[i + j]));
  }
  double sum = 0.0;
  for (size_t j = 0; j < kLanes; ++j) sum += lane[j];
  for (; i < count; ++i) sum += static_cast<double>(std::fabs(x[i]));
  return std::isnan(sum) ? INFINITY : sum;
}

// The sign bits of x[0, count), 32 elements to a little-endian word (element i
// in bit i % 8 of byte i / 8); the bits of the last partial byte past count are 0.
CHORUS_VECTOR_CLONES void PackSigns(const float* x, size_t count, std::byte* bits) {
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    uint32_t word = 0;
    for (unsigned k = 0; k < 32; ++k) word |= (std::bit_cast<uint32_t>(x[i + k]) >> 31) << k;
    Put<uint32_t>(bits + i / 8, word);
  }
  for (; i < count; ++i) {
    if (std::signbit(x[i])) bits[i / 8] |= static_cast<std::byte>(1u << (i % 8));
  }
}

// out[i] = +-scale for i in [begin, end) by the sign bits (PackSigns).
CHORUS_VECTOR_CLONES void UnpackSigns(const std::byte* bits, size_t begin, size_t end, float scale, float* out) {
  const uint32_t magnitude = std::bit_cast<uint32_t>(scale);
  auto bit = [&](size_t i) { return (static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u; };
  size_t i = begin;
  for (; i < end && i % 32 != 0; ++i) out[i] = std::bit_cast<float>(magnitude | (bit(i) << 31));
  for (; i + 32 <= end; i += 32) {
    const uint32_t word = Get<uint32_t>(bits + i / 8);
    for (unsigned k = 0; k < 32; ++k) out[i + k] = std::bit_cast<float>(magnitude | (((word >> k) & 1u) << 31));
  }
  for (; i < end; ++i) out[i] = std::bit_cast<float>(magnitude | (bit(i) << 31));
}

class SignCodec final : public Codec {
 public:
  explicit SignCodec(int chunk) : chunk_(static_cast<size_t>(chunk)) {}

  CodecKind kind() const override { return CodecKind::kSign; }
  std::string Describe() const override { return "sign(chunk=" + std::to_string(chunk_) + ")"; }
  size_t WireBytes(size_t n) const override {
    return kHeaderBytes + 4 * NumChunks(n, chunk_) + (n + 7) / 8;
  }

  Status Encode(std::span<const float> x, uint64_t /*seed*/,
                std::vector<std::byte>* out) const override {
    const size_t n = x.size();
    const size_t chunks = NumChunks(n, chunk_);
    out->assign(WireBytes(n), std::byte{0});
    WriteHeader(Header{kind(), static_cast<uint16_t>(chunk_ - 1), n}, out->data());
    std::byte* scales = out->data() + kHeaderBytes;
    std::byte* bits = scales + 4 * chunks;
    for (size_t c = 0; c < chunks; ++c) {
      const size_t begin = c * chunk_;
      const size_t end = std::min(n, begin + chunk_);
      Put<float>(scales + 4 * c, static_cast<float>(MagnitudeSum(x.data() + begin, end - begin) /
                                                    static_cast<double>(end - begin)));
    }
    PackSigns(x.data(), n, bits);
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    CHORUS_RETURN_IF_ERROR(CheckChunk(h, chunk_, kind()));
    const size_t n = out.size();
    const size_t chunks = NumChunks(n, chunk_);
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, kHeaderBytes + 4 * chunks + (n + 7) / 8, kind()));
    const std::byte* scales = bytes.data() + kHeaderBytes;
    const std::byte* bits = scales + 4 * chunks;
    if (n % 8 != 0) {
      const auto last = static_cast<unsigned>(bits[n / 8]);
      if ((last >> (n % 8)) != 0) {
        return DataLoss("codec sign: unused bits of the last byte are not zero");
      }
    }
    for (size_t c = 0; c < chunks; ++c) {
      const float scale = Get<float>(scales + 4 * c);
      if (!std::isfinite(scale)) {
        return OutOfRange("codec sign: non-finite scale of chunk " + std::to_string(c));
      }
      if (scale < 0.0f) return DataLoss("codec sign: negative scale of chunk " + std::to_string(c));
      UnpackSigns(bits, c * chunk_, std::min(n, c * chunk_ + chunk_), scale, out.data());
    }
    return Status::Ok();
  }

 private:
  static size_t NumChunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

  size_t chunk_;
};

}  // namespace

std::unique_ptr<Codec> MakeSignCodec(int chunk) { return std::make_unique<SignCodec>(chunk); }

}  // namespace chorus::gossip::codec_wire
