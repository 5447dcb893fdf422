// The dense codecs: none (raw f32), fp16 and int8 with a per-chunk scale.
// Formats and error bounds are in codec.h; the header in codec_wire.h.
//
// int8 payload: ceil(n / chunk) f32 scales, then n int8 values in [-127, 127]
// (-128 never occurs and is rejected). scale_c = max_{i in chunk c} |x_i| / 127;
// nearest: q_i = round(x_i / scale_c) computed in double; stochastic:
// q_i = floor(x_i / scale_c + u_i), u_i uniform in [0, 1) from SplitMix64(seed)
// drawn in element order. A chunk whose max |x| is not finite gets that scale (so
// the receiver rejects the message) and q = 0 (never a NaN-to-int conversion).
#include <algorithm>
#include <cmath>
#include <string>

#include "gossip/codecs/codec_wire.h"
#include "kernels/ops.h"
#include "common/split_mix64.h"

namespace chorus::gossip::codec_wire {
namespace {

class NoneCodec final : public Codec {
 public:
  CodecKind kind() const override { return CodecKind::kNone; }
  std::string Describe() const override { return "none"; }
  bool Lossless() const override { return true; }
  size_t WireBytes(size_t n) const override { return kHeaderBytes + 4 * n; }

  Status Encode(std::span<const float> x, uint64_t /*seed*/,
                std::vector<std::byte>* out) const override {
    out->resize(WireBytes(x.size()));
    WriteHeader(Header{kind(), 0, x.size()}, out->data());
    if (!x.empty()) std::memcpy(out->data() + kHeaderBytes, x.data(), 4 * x.size());
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    (void)h;
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, WireBytes(out.size()), kind()));
    if (!out.empty()) std::memcpy(out.data(), bytes.data() + kHeaderBytes, 4 * out.size());
    return CheckFinite(out, kind());
  }
};

class Fp16Codec final : public Codec {
 public:
  CodecKind kind() const override { return CodecKind::kFp16; }
  std::string Describe() const override { return "fp16"; }
  size_t WireBytes(size_t n) const override { return kHeaderBytes + 2 * n; }

  Status Encode(std::span<const float> x, uint64_t /*seed*/,
                std::vector<std::byte>* out) const override {
    out->resize(WireBytes(x.size()));
    WriteHeader(Header{kind(), 0, x.size()}, out->data());
    // Convert in blocks through an aligned stack buffer: the output bytes after
    // the 16-byte header are 2-byte aligned, but the kernel takes uint16_t*.
    constexpr size_t kBlock = 1024;
    uint16_t half[kBlock];
    for (size_t begin = 0; begin < x.size(); begin += kBlock) {
      const size_t count = std::min(kBlock, x.size() - begin);
      kernels::FloatToHalf(x.data() + begin, half, count);
      std::memcpy(out->data() + kHeaderBytes + 2 * begin, half, 2 * count);
    }
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    (void)h;
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, WireBytes(out.size()), kind()));
    constexpr size_t kBlock = 1024;
    uint16_t half[kBlock];
    for (size_t begin = 0; begin < out.size(); begin += kBlock) {
      const size_t count = std::min(kBlock, out.size() - begin);
      std::memcpy(half, bytes.data() + kHeaderBytes + 2 * begin, 2 * count);
      kernels::HalfToFloat(half, out.data() + begin, count);
    }
    return CheckFinite(out, kind());
  }
};

class Int8Codec final : public Codec {
 public:
  Int8Codec(int chunk, bool stochastic)
      : chunk_(static_cast<size_t>(chunk)), stochastic_(stochastic) {}

  CodecKind kind() const override { return CodecKind::kInt8; }
  std::string Describe() const override {
    return "int8(chunk=" + std::to_string(chunk_) + ", " +
           (stochastic_ ? "stochastic" : "nearest") + ")";
  }
  size_t WireBytes(size_t n) const override { return kHeaderBytes + 4 * NumChunks(n, chunk_) + n; }

  Status Encode(std::span<const float> x, uint64_t seed,
                std::vector<std::byte>* out) const override {
    const size_t n = x.size();
    const size_t chunks = NumChunks(n, chunk_);
    out->resize(WireBytes(n));
    WriteHeader(Header{kind(), static_cast<uint16_t>(chunk_ - 1), n}, out->data());
    std::byte* scales = out->data() + kHeaderBytes;
    auto* q = reinterpret_cast<int8_t*>(scales + 4 * chunks);
    SplitMix64 rng(seed);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t begin = c * chunk_;
      const size_t end = std::min(n, begin + chunk_);
      float max_abs = 0.0f;
      for (size_t i = begin; i < end; ++i) max_abs = std::max(max_abs, Magnitude(x[i]));
      const float scale = max_abs / 127.0f;
      Put<float>(scales + 4 * c, scale);
      if (!std::isfinite(scale) || scale == 0.0f) {
        std::fill(q + begin, q + end, int8_t{0});
        continue;
      }
      const double inv = 1.0 / static_cast<double>(scale);
      for (size_t i = begin; i < end; ++i) {
        double v = static_cast<double>(x[i]) * inv;
        if (stochastic_) {
          const double u = static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
          v = std::floor(v + u);
        } else {
          v = std::nearbyint(v);
        }
        q[i] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
      }
    }
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    CHORUS_RETURN_IF_ERROR(CheckChunk(h, chunk_, kind()));
    const size_t n = out.size();
    const size_t chunks = NumChunks(n, chunk_);
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, kHeaderBytes + 4 * chunks + n, kind()));
    const std::byte* scales = bytes.data() + kHeaderBytes;
    const auto* q = reinterpret_cast<const int8_t*>(scales + 4 * chunks);
    for (size_t c = 0; c < chunks; ++c) {
      const float scale = Get<float>(scales + 4 * c);
      const size_t begin = c * chunk_;
      const size_t end = std::min(n, begin + chunk_);
      if (!std::isfinite(scale)) {
        return OutOfRange("codec int8: non-finite scale of chunk " + std::to_string(c) +
                          " (elements " + std::to_string(begin) + ".." + std::to_string(end - 1) +
                          ")");
      }
      if (scale < 0.0f) {
        return DataLoss("codec int8: negative scale of chunk " + std::to_string(c));
      }
      for (size_t i = begin; i < end; ++i) {
        if (q[i] == -128) {
          return DataLoss("codec int8: value -128 at element " + std::to_string(i) +
                          " is outside [-127, 127]");
        }
        out[i] = static_cast<float>(q[i]) * scale;
      }
    }
    return CheckFinite(out, kind());
  }

 private:
  static size_t NumChunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

  size_t chunk_;
  bool stochastic_;
};

}  // namespace

std::unique_ptr<Codec> MakeNoneCodec() { return std::make_unique<NoneCodec>(); }
std::unique_ptr<Codec> MakeFp16Codec() { return std::make_unique<Fp16Codec>(); }
std::unique_ptr<Codec> MakeInt8Codec(int chunk, bool stochastic_rounding) {
  return std::make_unique<Int8Codec>(chunk, stochastic_rounding);
}

}  // namespace chorus::gossip::codec_wire
