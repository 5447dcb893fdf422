// The sign codec: one bit per element and one f32 scale per chunk (codec.h).
//
// Payload: ceil(n / chunk) f32 scales, scale_c = mean_{i in chunk c} |x_i|
// (accumulated in double), then ceil(n / 8) bytes of sign bits, element i in bit
// i % 8 of byte i / 8, set when x_i is negative (std::signbit, so -0 counts as
// negative); the unused high bits of the last byte are 0. Decoding gives
// x_i = +-scale_c. Per chunk, ||x - Q(x)||^2 = ||x||^2 - ||x||_1^2 / chunk, so Q is
// a contraction (what CHOCO-gossip needs).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <string>

#include "gossip/codecs/codec_wire.h"

namespace chorus::gossip::codec_wire {
namespace {

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
      double sum = 0.0;
      for (size_t i = begin; i < end; ++i) sum += static_cast<double>(Magnitude(x[i]));
      Put<float>(scales + 4 * c, static_cast<float>(sum / static_cast<double>(end - begin)));
      // Sign bits: whole bytes at a time where the chunk allows (branch-free).
      size_t i = begin;
      for (; i < end && i % 8 != 0; ++i) {
        if (std::signbit(x[i])) bits[i / 8] |= static_cast<std::byte>(1u << (i % 8));
      }
      for (; i + 8 <= end; i += 8) {
        unsigned byte = 0;
        for (unsigned k = 0; k < 8; ++k) byte |= (std::bit_cast<uint32_t>(x[i + k]) >> 31) << k;
        bits[i / 8] = static_cast<std::byte>(byte);
      }
      for (; i < end; ++i) {
        if (std::signbit(x[i])) bits[i / 8] |= static_cast<std::byte>(1u << (i % 8));
      }
    }
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
      const size_t begin = c * chunk_;
      const size_t end = std::min(n, begin + chunk_);
      // out_i = +-scale: the sign bit of the float set from the wire bit.
      const uint32_t magnitude = std::bit_cast<uint32_t>(scale);
      auto value = [&](unsigned bit) { return std::bit_cast<float>(magnitude | (uint32_t{bit} << 31)); };
      size_t i = begin;
      for (; i < end && i % 8 != 0; ++i) out[i] = value((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1u);
      for (; i + 8 <= end; i += 8) {
        const unsigned byte = static_cast<unsigned>(bits[i / 8]);
        for (unsigned k = 0; k < 8; ++k) out[i + k] = value((byte >> k) & 1u);
      }
      for (; i < end; ++i) out[i] = value((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1u);
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
