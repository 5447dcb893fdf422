// The sparse codecs: top-k and random-k (codec.h). Elements not sent decode to 0.
//
// top-k payload:    u64 k, k u32 indices (strictly ascending, < n), k f32 values.
//   Selection: nth_element over the indices by (|x| descending, index ascending),
//   NaN counting as the largest magnitude so that a diverged vector is sent (and
//   rejected by the receiver) rather than hidden; then the k indices are sorted.
// random-k payload: u64 k, u64 seed, k f32 values at the indices that
//   DrawRandomIndices(seed, n, k) gives, in ascending order. The draw is Floyd's
//   algorithm (k distinct indices in k steps, a bitmap of n bits for membership)
//   on SplitMix64, whose bounded draw is defined here, not by <random>, so every
//   host redraws the same indices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gossip/codecs/codec_wire.h"
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
  explicit TopKCodec(double ratio) : ratio_(ratio) {}

  CodecKind kind() const override { return CodecKind::kTopK; }
  std::string Describe() const override { return "top-k(ratio=" + std::to_string(ratio_) + ")"; }
  size_t WireBytes(size_t n) const override {
    return kHeaderBytes + 8 + 8 * SparseCount(ratio_, n);
  }

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
    WriteHeader(Header{kind(), 0, n}, out->data());
    std::byte* p = out->data() + kHeaderBytes;
    Put<uint64_t>(p, k);
    std::byte* indices = p + 8;
    std::byte* values = indices + 4 * k;
    for (size_t j = 0; j < k; ++j) {
      Put<uint32_t>(indices + 4 * j, order[j]);
      Put<float>(values + 4 * j, x[order[j]]);
    }
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    (void)h;
    CHORUS_ASSIGN_OR_RETURN(const size_t k, ReadCount(bytes, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, kHeaderBytes + 8 + 8 * k, kind()));
    const std::byte* indices = bytes.data() + kHeaderBytes + 8;
    const std::byte* values = indices + 4 * k;
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
      const float v = Get<float>(values + 4 * j);
      if (!std::isfinite(v)) {
        return OutOfRange("codec top-k: non-finite value at element " + std::to_string(index));
      }
      out[index] = v;
    }
    return Status::Ok();
  }

 private:
  double ratio_;
};

class RandomKCodec final : public Codec {
 public:
  explicit RandomKCodec(double ratio) : ratio_(ratio) {}

  CodecKind kind() const override { return CodecKind::kRandomK; }
  std::string Describe() const override { return "random-k(ratio=" + std::to_string(ratio_) + ")"; }
  size_t WireBytes(size_t n) const override {
    return kHeaderBytes + 16 + 4 * SparseCount(ratio_, n);
  }

  Status Encode(std::span<const float> x, uint64_t seed,
                std::vector<std::byte>* out) const override {
    const size_t n = x.size();
    CHORUS_RETURN_IF_ERROR(CheckSparseLength(n, kind()));
    const size_t k = SparseCount(ratio_, n);
    std::vector<uint32_t> indices;
    DrawRandomIndices(seed, n, k, &indices);
    out->resize(WireBytes(n));
    WriteHeader(Header{kind(), 0, n}, out->data());
    std::byte* p = out->data() + kHeaderBytes;
    Put<uint64_t>(p, k);
    Put<uint64_t>(p + 8, seed);
    std::byte* values = p + 16;
    for (size_t j = 0; j < k; ++j) Put<float>(values + 4 * j, x[indices[j]]);
    return Status::Ok();
  }

  Status Decode(std::span<const std::byte> bytes, std::span<float> out) const override {
    CHORUS_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, kind(), out.size()));
    (void)h;
    CHORUS_RETURN_IF_ERROR(CheckSparseLength(out.size(), kind()));
    CHORUS_ASSIGN_OR_RETURN(const size_t k, ReadCount(bytes, out.size(), kind()));
    CHORUS_RETURN_IF_ERROR(CheckSize(bytes, kHeaderBytes + 16 + 4 * k, kind()));
    const uint64_t seed = Get<uint64_t>(bytes.data() + kHeaderBytes + 8);
    const std::byte* values = bytes.data() + kHeaderBytes + 16;
    std::vector<uint32_t> indices;
    DrawRandomIndices(seed, out.size(), k, &indices);
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t j = 0; j < k; ++j) {
      const float v = Get<float>(values + 4 * j);
      if (!std::isfinite(v)) {
        return OutOfRange("codec random-k: non-finite value at element " +
                          std::to_string(indices[j]));
      }
      out[indices[j]] = v;
    }
    return Status::Ok();
  }

 private:
  double ratio_;
};

}  // namespace

std::unique_ptr<Codec> MakeTopKCodec(double ratio) { return std::make_unique<TopKCodec>(ratio); }
std::unique_ptr<Codec> MakeRandomKCodec(double ratio) {
  return std::make_unique<RandomKCodec>(ratio);
}

}  // namespace chorus::gossip::codec_wire
