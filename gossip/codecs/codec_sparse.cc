// The sparse codecs: top-k and random-k (codec.h). Elements not sent decode to 0.
//
// top-k payload:    u64 k, k u32 indices (strictly ascending, < n), the values block.
//   Selection: nth_element over the indices by (|x| descending, index ascending),
//   NaN counting as the largest magnitude so that a diverged vector is sent (and
//   rejected by the receiver) rather than hidden; then the k indices are sorted.
// random-k payload: u64 k, u64 seed, the values block, its values at the indices
//   that DrawRandomIndices(seed, n, k) gives, in ascending order. The draw is
//   Floyd's algorithm (k distinct indices in k steps, a bitmap of n bits for
//   membership) on SplitMix64, whose bounded draw is defined here, not by <random>,
//   so every host redraws the same indices. The draw does not depend on the width.
//
// Values block: the k kept values v_j in the order of their indices, by value_bits
// (the header parameter holds the width: 0 for 32, else 16 or 8):
//   32  k f32.                                     4k bytes
//   16  k IEEE binary16, round to nearest even.    2k bytes
//   8   f32 scale = max_j |v_j| / 127, then k int8 q_j = nearbyint(v_j / scale)
//       in [-127, 127], computed in double (-128 never occurs and is rejected).
//       4 + k bytes (the scale is present even for k = 0). A scale that is 0 or
//       not finite (a NaN or Inf among the v_j) is sent with every q_j = 0, so the
//       receiver decodes zeros or rejects the non-finite scale.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gossip/codecs/codec_wire.h"
#include "kernels/ops.h"
#include "common/split_mix64.h"

namespace chorus::gossip::codec_wire {
namespace {

constexpr uint64_t kMaxSparseElements = uint64_t{1} << 32;

Status CheckSparseLength(size_t n, CodecKind kind) {
  if (static_cast<uint64_t>(n) < kMaxSparseElements) return Status::Ok();
  return InvalidArgument("codec " + std::string(CodecKindName(kind)) + ": " + std::to_string(n) +
                         " elements exceed the u32 index range");
}

// Reads k from the payload and checks it against n.
Result<size_t> ReadCount(std::span<const std::byte> bytes, size_t n, CodecKind kind) {
  if (bytes.size() < kHeaderBytes + 8) {
    return Err(DataLoss("codec " + std::string(CodecKindName(kind)) + ": message of " +
                        std::to_string(bytes.size()) + " bytes has no element count"));
  }
  const uint64_t k = Get<uint64_t>(bytes.data() + kHeaderBytes);
  if (k > n) {
    return Err(DataLoss("codec " + std::string(CodecKindName(kind)) + ": " + std::to_string(k) +
                        " kept elements exceed the " + std::to_string(n) + " in the vector"));
  }
  return static_cast<size_t>(k);
}

// kDataLoss unless the message keeps the k this codec keeps of n elements:
// the ratio is a setting every node shares, so another k is a corrupt or
// misconfigured peer.
Status CheckKept(size_t k, double ratio, size_t n, CodecKind kind) {
  const size_t expected = SparseCount(ratio, n);
  if (k == expected) return Status::Ok();
  return DataLoss("codec " + std::string(CodecKindName(kind)) + ": " + std::to_string(k) + " kept elements of " +
                  std::to_string(n) + ", expected " + std::to_string(expected) + " (ratio " + std::to_string(ratio) +
                  ")");
}

// The header parameter that carries a value width: 0 for 32 (the plain f32
// format), else the width in bits.
uint16_t WidthParam(int value_bits) {
  return value_bits == 32 ? 0 : static_cast<uint16_t>(value_bits);
}

// kDataLoss unless the message's value width is the decoder's.
Status CheckWidth(const Header& h, int value_bits, CodecKind kind) {
  if (h.param == WidthParam(value_bits)) return Status::Ok();
  const std::string expected = std::to_string(value_bits) + "-bit values";
  const std::string name(CodecKindName(kind));
  if (h.param == 16 || h.param == 8 || h.param == 0) {
    const int got = h.param == 0 ? 32 : h.param;
    return DataLoss("codec " + name + ": message carries " + std::to_string(got) +
                    "-bit values but the receiver expects " + expected);
  }
  return DataLoss("codec " + name + ": unknown value width " + std::to_string(h.param) +
                  " in the header (the receiver expects " + expected + ")");
}

// Size of the values block for k values.
size_t ValueBytes(int value_bits, size_t k) {
  switch (value_bits) {
    case 16:
      return 2 * k;
    case 8:
      return 4 + k;
    default:
      return 4 * k;
  }
}

// Writes the values block of `values` (k elements) at `at`.
void PutValues(int value_bits, std::span<const float> values, std::byte* at) {
  const size_t k = values.size();
  if (value_bits == 32) {
    if (k > 0) std::memcpy(at, values.data(), 4 * k);
    return;
  }
  if (value_bits == 16) {
    std::vector<uint16_t> half(k);
    kernels::FloatToHalf(values.data(), half.data(), k);
    if (k > 0) std::memcpy(at, half.data(), 2 * k);
    return;
  }
  float max_abs = 0.0f;
  for (float v : values) max_abs = std::max(max_abs, Magnitude(v));
  const float scale = max_abs / 127.0f;
  Put<float>(at, scale);
  std::byte* q = at + 4;
  if (!std::isfinite(scale) || scale == 0.0f) {
    std::fill(q, q + k, std::byte{0});
    return;
  }
  for (size_t j = 0; j < k; ++j) {
    const double r = std::nearbyint(static_cast<double>(values[j]) / scale);
    q[j] = static_cast<std::byte>(static_cast<int8_t>(std::clamp(r, -127.0, 127.0)));
  }
}

// Reads the values block at `at` into `values` (k elements). Rejects a
// non-finite 8-bit scale (kOutOfRange), a negative one and q = -128 (kDataLoss);
// decoded values may still be non-finite (16-bit Inf or NaN): the caller checks.
Status GetValues(int value_bits, const std::byte* at, CodecKind kind, std::span<float> values) {
  const size_t k = values.size();
  if (value_bits == 32) {
    if (k > 0) std::memcpy(values.data(), at, 4 * k);
    return Status::Ok();
  }
  if (value_bits == 16) {
    std::vector<uint16_t> half(k);
    if (k > 0) std::memcpy(half.data(), at, 2 * k);
    kernels::HalfToFloat(half.data(), values.data(), k);
    return Status::Ok();
  }
  const std::string name(CodecKindName(kind));
  const float scale = Get<float>(at);
  if (!std::isfinite(scale)) {
    return OutOfRange("codec " + name + ": non-finite scale of the 8-bit values");
  }
  if (scale < 0.0f) return DataLoss("codec " + name + ": negative scale of the 8-bit values");
  const auto* q = reinterpret_cast<const int8_t*>(at + 4);
  for (size_t j = 0; j < k; ++j) {
    if (q[j] == -128) {
      return DataLoss("codec " + name + ": 8-bit value -128 at position " + std::to_string(j) +
                      " is outside [-127, 127]");
    }
    values[j] = static_cast<float>(q[j]) * scale;
  }
  return Status::Ok();
}

std::string WidthSuffix(int value_bits) {
  return value_bits == 32 ? "" : ", " + std::to_string(value_bits) + "-bit values";
}

// k distinct indices in [0, n), ascending, from `seed` (see the file comment).
void DrawRandomIndices(uint64_t seed, size_t n, size_t k, std::vector<uint32_t>* out) {
  out->clear();
  out->reserve(k);
  std::vector<uint64_t> taken((n + 63) / 64, 0);
  SplitMix64 rng(seed);
  for (size_t j = n - k; j < n; ++j) {
    size_t t = static_cast<size_t>(rng.Below(static_cast<uint64_t>(j) + 1));
    if (taken[t / 64] >> (t % 64) & 1u) t = j;
    taken[t / 64] |= uint64_t{1} << (t % 64);
    out->push_back(static_cast<uint32_t>(t));
  }
  std::sort(out->begin(), out->end());
}

class TopKCodec final : public Codec {
 public:
  TopKCodec(double ratio, int value_bits) : ratio_(ratio), value_bits_(value_bits) {}

  CodecKind kind() const override { return CodecKind::kTopK; }
  std::string Describe() const override {
    return "top-k(ratio=" + std::to_string(ratio_) + WidthSuffix(value_bits_) + ")";
  }
  size_t WireBytes(size_t n) const override { return MessageBytes(SparseCount(ratio_, n)); }

  Status Encode(std::span<const float> x, uint64_t /*seed*/,
                std::vector<std::byte>* out) const override {
    const size_t n = x.size();
    CHORUS_RETURN_IF_ERROR(CheckSparseLength(n, kind()));
    const size_t k = SparseCount(ratio_, n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    auto larger = [&](uint32_t a, uint32_t b) {
      const float ma = Magnitude(x[a]);
      const float mb = Magnitude(x[b]);
      return ma > mb || (ma == mb && a < b);
    };
    if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
    order.resize(k);
    std::sort(order.begin(), order.end());

    out->resize(WireBytes(n));
    WriteHeader(Header{kind(), WidthParam(value_bits_), n}, out->data());
    std::byte* p = out->data() + kHeaderBytes;
    Put<uint64_t>(p, k);
    std::byte* indices = p + 8;
    std::vector<float> values(k);
    for (size_t j = 0; j < k; ++j) {
      Put<uint32_t>(indices + 4 * j, order[j]);
      values[j] = x[order[j]];
    }
    PutValues(value_bits_, values, indices + 4 * k);
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    CHORUS_RETURN_IF_ERROR(CheckWidth(h, value_bits_, kind()));
    CHORUS_ASSIGN_OR_RETURN(const size_t k, ReadCount(bytes, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckKept(k, ratio_, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, MessageBytes(k), kind()));
    const std::byte* indices = bytes.data() + kHeaderBytes + 8;
    std::vector<float> values(k);
    CHORUS_RETURN_IF_ERROR(GetValues(value_bits_, indices + 4 * k, kind(), values));
    std::fill(out.begin(), out.end(), 0.0f);
    int64_t previous = -1;
    for (size_t j = 0; j < k; ++j) {
      const uint32_t index = Get<uint32_t>(indices + 4 * j);
      if (static_cast<int64_t>(index) <= previous || index >= out.size()) {
        return DataLoss(
            "codec top-k: index " + std::to_string(index) + " at position " + std::to_string(j) +
            " is out of range or not ascending (n = " + std::to_string(out.size()) + ")");
      }
      previous = index;
      if (!std::isfinite(values[j])) {
        return OutOfRange("codec top-k: non-finite value at element " + std::to_string(index));
      }
      out[index] = values[j];
    }
    return Status::Ok();
  }

 private:
  // Header, u64 k, k u32 indices, the values block.
  size_t MessageBytes(size_t k) const {
    return kHeaderBytes + 8 + 4 * k + ValueBytes(value_bits_, k);
  }

  double ratio_;
  int value_bits_;
};

class RandomKCodec final : public Codec {
 public:
  RandomKCodec(double ratio, int value_bits) : ratio_(ratio), value_bits_(value_bits) {}

  CodecKind kind() const override { return CodecKind::kRandomK; }
  std::string Describe() const override {
    return "random-k(ratio=" + std::to_string(ratio_) + WidthSuffix(value_bits_) + ")";
  }
  size_t WireBytes(size_t n) const override { return MessageBytes(SparseCount(ratio_, n)); }

  Status Encode(std::span<const float> x, uint64_t seed,
                std::vector<std::byte>* out) const override {
    const size_t n = x.size();
    CHORUS_RETURN_IF_ERROR(CheckSparseLength(n, kind()));
    const size_t k = SparseCount(ratio_, n);
    std::vector<uint32_t> indices;
    DrawRandomIndices(seed, n, k, &indices);
    out->resize(WireBytes(n));
    WriteHeader(Header{kind(), WidthParam(value_bits_), n}, out->data());
    std::byte* p = out->data() + kHeaderBytes;
    Put<uint64_t>(p, k);
    Put<uint64_t>(p + 8, seed);
    std::vector<float> values(k);
    for (size_t j = 0; j < k; ++j) values[j] = x[indices[j]];
    PutValues(value_bits_, values, p + 16);
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    CHORUS_RETURN_IF_ERROR(CheckWidth(h, value_bits_, kind()));
    CHORUS_RETURN_IF_ERROR(CheckSparseLength(out.size(), kind()));
    CHORUS_ASSIGN_OR_RETURN(const size_t k, ReadCount(bytes, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckKept(k, ratio_, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, MessageBytes(k), kind()));
    const uint64_t seed = Get<uint64_t>(bytes.data() + kHeaderBytes + 8);
    std::vector<float> values(k);
    const std::byte* block = bytes.data() + kHeaderBytes + 16;
    CHORUS_RETURN_IF_ERROR(GetValues(value_bits_, block, kind(), values));
    std::vector<uint32_t> indices;
    DrawRandomIndices(seed, out.size(), k, &indices);
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t j = 0; j < k; ++j) {
      if (!std::isfinite(values[j])) {
        return OutOfRange("codec random-k: non-finite value at element " +
                          std::to_string(indices[j]));
      }
      out[indices[j]] = values[j];
    }
    return Status::Ok();
  }

 private:
  // Header, u64 k, u64 seed, the values block.
  size_t MessageBytes(size_t k) const { return kHeaderBytes + 16 + ValueBytes(value_bits_, k); }

  double ratio_;
  int value_bits_;
};

}  // namespace

std::unique_ptr<Codec> MakeTopKCodec(double ratio, int value_bits) {
  return std::make_unique<TopKCodec>(ratio, value_bits);
}
std::unique_ptr<Codec> MakeRandomKCodec(double ratio, int value_bits) {
  return std::make_unique<RandomKCodec>(ratio, value_bits);
}

}  // namespace chorus::gossip::codec_wire
