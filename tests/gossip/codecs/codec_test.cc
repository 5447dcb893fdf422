// Tests of the gossip codecs: round trips and their error bounds, exact wire
// sizes, rejection of malformed input and of non-finite values.
#include "gossip/codecs/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RandomVector;

std::unique_ptr<Codec> Make(CodecOptions options) {
  auto codec = MakeCodec(options);
  EXPECT_TRUE(codec.has_value()) << codec.error().ToString();
  return std::move(*codec);
}

CodecOptions Kind(CodecKind kind) {
  CodecOptions o;
  o.kind = kind;
  return o;
}

std::vector<CodecOptions> AllKinds() {
  CodecOptions int8 = Kind(CodecKind::kInt8);
  int8.chunk = 7;
  CodecOptions int8s = int8;
  int8s.stochastic_rounding = true;
  CodecOptions sign = Kind(CodecKind::kSign);
  sign.chunk = 5;
  CodecOptions topk = Kind(CodecKind::kTopK);
  topk.ratio = 0.1;
  CodecOptions randk = Kind(CodecKind::kRandomK);
  randk.ratio = 0.1;
  return {Kind(CodecKind::kNone), Kind(CodecKind::kFp16), int8, int8s, sign, topk, randk};
}

std::vector<float> Decode(const Codec& codec, const std::vector<std::byte>& bytes, size_t n) {
  std::vector<float> out(n);
  Status s = codec.Decode(bytes, out);
  EXPECT_TRUE(s.ok()) << codec.Describe() << ": " << s.ToString();
  return out;
}

TEST(CodecTest, ParsesNamesAndValidatesOptions) {
  for (auto kind : {CodecKind::kNone, CodecKind::kFp16, CodecKind::kInt8, CodecKind::kSign,
                    CodecKind::kTopK, CodecKind::kRandomK}) {
    auto parsed = ParseCodecKind(CodecKindName(kind));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_FALSE(ParseCodecKind("zip").has_value());
  CodecOptions bad = Kind(CodecKind::kTopK);
  bad.ratio = 0.0;
  EXPECT_NE(ValidateCodecOptions(bad).message().find("ratio"), std::string::npos);
  bad = Kind(CodecKind::kInt8);
  bad.chunk = 0;
  EXPECT_NE(ValidateCodecOptions(bad).message().find("chunk"), std::string::npos);
  EXPECT_FALSE(MakeCodec(bad).has_value());
}

TEST(CodecTest, WireBytesIsTheEncodedSize) {
  for (const auto& options : AllKinds()) {
    auto codec = Make(options);
    for (size_t n : {0u, 1u, 7u, 8u, 9u, 255u, 1000u}) {
      std::vector<std::byte> bytes;
      ASSERT_TRUE(codec->Encode(RandomVector(1, 0, n), 5, &bytes).ok());
      EXPECT_EQ(bytes.size(), codec->WireBytes(n)) << codec->Describe() << " n=" << n;
      if (n > 0) Decode(*codec, bytes, n);
    }
  }
}

TEST(CodecTest, NoneIsBitExact) {
  auto codec = Make(Kind(CodecKind::kNone));
  auto x = RandomVector(2, 0, 1001);
  x[3] = -0.0f;
  x[4] = 1e-40f;  // subnormal
  std::vector<std::byte> bytes;
  ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
  auto y = Decode(*codec, bytes, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(x[i])) << i;
  }
}

TEST(CodecTest, Fp16RelativeErrorIsAtMostTwoToMinusEleven) {
  auto codec = Make(Kind(CodecKind::kFp16));
  // Magnitudes 1e-4 .. 1e4: inside fp16's normal range (6.1e-5 .. 65504), where
  // round to nearest with 10 stored mantissa bits errs by at most 2^-11 relative.
  std::vector<float> x(2000);
  SplitMix64 rng(3);
  for (auto& v : x) {
    v = static_cast<float>(std::pow(10.0, 4.0 * rng.Symmetric()) * (rng.Next() & 1 ? 1 : -1));
  }
  std::vector<std::byte> bytes;
  ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
  auto y = Decode(*codec, bytes, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -11)) << x[i];
  }
}

// The scale int8 uses for the chunk holding element i.
float Int8Scale(const std::vector<float>& x, size_t chunk, size_t i) {
  const size_t begin = i / chunk * chunk;
  float m = 0.0f;
  for (size_t j = begin; j < std::min(x.size(), begin + chunk); ++j)
    m = std::max(m, std::fabs(x[j]));
  return m / 127.0f;
}

TEST(CodecTest, Int8NearestErrsByAtMostHalfAScale) {
  for (int chunk : {1, 7, 256}) {
    CodecOptions o = Kind(CodecKind::kInt8);
    o.chunk = chunk;
    auto codec = Make(o);
    auto x = RandomVector(4, chunk, 1000, -3.0, 3.0);
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
    auto y = Decode(*codec, bytes, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = Int8Scale(x, chunk, i);
      // scale/2 from rounding q; plus one float rounding of q * scale (2^-24 relative).
      EXPECT_LE(std::fabs(y[i] - x[i]), scale / 2 + std::ldexp(std::fabs(y[i]), -24))
          << "chunk " << chunk << " element " << i;
    }
  }
}

TEST(CodecTest, Int8StochasticIsUnbiasedWithinOneScale) {
  CodecOptions o = Kind(CodecKind::kInt8);
  o.chunk = 16;
  o.stochastic_rounding = true;
  auto codec = Make(o);
  auto x = RandomVector(5, 0, 64);
  std::vector<double> mean(x.size(), 0.0);
  constexpr int kDraws = 2000;
  for (int s = 0; s < kDraws; ++s) {
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, 1000 + s, &bytes).ok());
    auto y = Decode(*codec, bytes, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = Int8Scale(x, 16, i);
      ASSERT_LT(std::fabs(y[i] - x[i]), scale * (1 + 1e-6f)) << i;
      mean[i] += y[i] / kDraws;
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    // Each draw is x +- at most one scale with mean x: the mean of 2000 draws has
    // standard deviation <= scale / (2 sqrt(2000)) ~ 0.011 scale; 0.06 scale is > 5 sigma.
    EXPECT_LE(std::fabs(mean[i] - x[i]), 0.06 * Int8Scale(x, 16, i)) << i;
  }
}

TEST(CodecTest, SignKeepsSignsAndTheMeanMagnitudePerChunk) {
  // Chunks not aligned to bytes (10, 3), aligned (256), and lengths that end
  // mid-byte, so every head / whole-byte / tail path of the bit packing runs.
  for (size_t chunk : {size_t{10}, size_t{3}, size_t{256}}) {
    for (size_t n : {size_t{95}, size_t{1003}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", n " + std::to_string(n));
      CodecOptions o = Kind(CodecKind::kSign);
      o.chunk = static_cast<int>(chunk);
      auto codec = Make(o);
      auto x = RandomVector(6, 0, n);
      x[0] = 0.0f;
      x[1] = -0.0f;
      std::vector<std::byte> bytes;
      ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
      auto y = Decode(*codec, bytes, x.size());
      for (size_t c = 0; c * chunk < x.size(); ++c) {
        double sum = 0.0;
        const size_t end = std::min<size_t>(x.size(), c * chunk + chunk);
        for (size_t i = c * chunk; i < end; ++i) sum += std::fabs(x[i]);
        const float scale = static_cast<float>(sum / static_cast<double>(end - c * chunk));
        for (size_t i = c * chunk; i < end; ++i) {
          ASSERT_EQ(std::fabs(y[i]), scale) << i;  // exact: the same double sum, one rounding
          ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
        }
      }
      EXPECT_FALSE(std::signbit(y[0]));  // +0 encodes as +scale
      EXPECT_TRUE(std::signbit(y[1]));   // -0 as -scale
    }
  }
}

TEST(CodecTest, TopKKeepsTheLargestExactly) {
  CodecOptions o = Kind(CodecKind::kTopK);
  o.ratio = 0.05;
  auto codec = Make(o);
  auto x = RandomVector(7, 0, 1001);
  std::vector<std::byte> bytes;
  ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
  auto y = Decode(*codec, bytes, x.size());
  const size_t k = SparseCount(0.05, x.size());
  EXPECT_EQ(k, 51u);  // ceil(0.05 * 1001)
  size_t kept = 0;
  float smallest_kept = INFINITY;
  float largest_dropped = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] != 0.0f) {
      EXPECT_EQ(y[i], x[i]) << i;
      ++kept;
      smallest_kept = std::min(smallest_kept, std::fabs(x[i]));
    } else {
      largest_dropped = std::max(largest_dropped, std::fabs(x[i]));
    }
  }
  EXPECT_EQ(kept, k);
  EXPECT_GE(smallest_kept, largest_dropped);
}

TEST(CodecTest, RandomKSendsOnlyValuesAtSeededIndices) {
  CodecOptions o = Kind(CodecKind::kRandomK);
  o.ratio = 0.02;
  auto codec = Make(o);
  auto x = RandomVector(8, 0, 2000, 1.0, 2.0);  // no zeros, so kept entries are visible
  const size_t k = SparseCount(0.02, x.size());
  EXPECT_EQ(codec->WireBytes(x.size()), 16 + 16 + 4 * k);  // header, k and seed, values
  std::vector<std::set<size_t>> kept_sets;
  for (uint64_t seed : {11u, 11u, 12u}) {
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, seed, &bytes).ok());
    auto y = Decode(*codec, bytes, x.size());
    std::set<size_t> kept;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] != 0.0f) {
        EXPECT_EQ(y[i], x[i]);
        kept.insert(i);
      }
    }
    EXPECT_EQ(kept.size(), k);
    kept_sets.push_back(kept);
  }
  EXPECT_EQ(kept_sets[0], kept_sets[1]);
  EXPECT_NE(kept_sets[0], kept_sets[2]);
}

TEST(CodecTest, RejectsMalformedInputWithDataLoss) {
  for (const auto& options : AllKinds()) {
    auto codec = Make(options);
    const auto x = RandomVector(9, 0, 100);
    std::vector<std::byte> good;
    ASSERT_TRUE(codec->Encode(x, 3, &good).ok());
    std::vector<float> out(x.size());
    auto expect_loss = [&](std::vector<std::byte> bytes, size_t n, const char* what) {
      std::vector<float> o(n);
      Status s = codec->Decode(bytes, o);
      EXPECT_EQ(s.code(), StatusCode::kDataLoss)
          << codec->Describe() << " " << what << ": " << s.ToString();
      EXPECT_NE(s.message().find(std::string(CodecKindName(options.kind))), std::string::npos);
    };
    expect_loss(std::vector<std::byte>(good.begin(), good.end() - 1), x.size(), "truncated");
    expect_loss(std::vector<std::byte>(good.begin(), good.begin() + 10), x.size(), "short header");
    auto trailing = good;
    trailing.push_back(std::byte{0});
    expect_loss(trailing, x.size(), "trailing");
    expect_loss(good, x.size() + 1, "wrong length");
    auto magic = good;
    magic[0] = std::byte{0};
    expect_loss(magic, x.size(), "magic");
    auto kind = good;
    kind[1] = static_cast<std::byte>(options.kind == CodecKind::kNone ? 2 : 1);
    expect_loss(kind, x.size(), "codec id");
  }
}

TEST(CodecTest, RejectsCorruptPayloads) {
  {
    CodecOptions o = Kind(CodecKind::kTopK);
    o.ratio = 0.1;
    auto codec = Make(o);
    auto x = RandomVector(10, 0, 50);
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
    auto unsorted = bytes;  // indices at 24.., swap the first two
    std::swap_ranges(unsorted.begin() + 24, unsorted.begin() + 28, unsorted.begin() + 28);
    std::vector<float> out(x.size());
    EXPECT_EQ(codec->Decode(unsorted, out).code(), StatusCode::kDataLoss);
    auto out_of_range = bytes;
    const uint32_t big = 50;
    std::memcpy(out_of_range.data() + 24 + 4 * 4, &big, 4);  // last of 5 indices
    EXPECT_EQ(codec->Decode(out_of_range, out).code(), StatusCode::kDataLoss);
  }
  {
    auto codec = Make(Kind(CodecKind::kInt8));
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(RandomVector(11, 0, 10), 0, &bytes).ok());
    bytes[16 + 4 + 3] = static_cast<std::byte>(0x80);  // q = -128
    std::vector<float> out(10);
    EXPECT_EQ(codec->Decode(bytes, out).code(), StatusCode::kDataLoss);
  }
  {
    auto codec = Make(Kind(CodecKind::kSign));
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(RandomVector(12, 0, 10), 0, &bytes).ok());
    bytes.back() |= static_cast<std::byte>(0x80);  // an unused bit of the last byte
    std::vector<float> out(10);
    EXPECT_EQ(codec->Decode(bytes, out).code(), StatusCode::kDataLoss);
  }
}

TEST(CodecTest, RejectsNonFiniteValues) {
  for (auto options : AllKinds()) {
    if (options.kind == CodecKind::kRandomK || options.kind == CodecKind::kTopK) {
      options.ratio = 1.0;  // keep every element, so the bad one travels
    }
    auto codec = Make(options);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      auto x = RandomVector(13, 0, 40);
      x[17] = bad;
      std::vector<std::byte> bytes;
      ASSERT_TRUE(codec->Encode(x, 1, &bytes).ok());
      std::vector<float> out(x.size());
      Status s = codec->Decode(bytes, out);
      EXPECT_TRUE(IsNonFiniteRejection(s))
          << codec->Describe() << " " << bad << ": " << s.ToString();
      EXPECT_NE(s.message().find("non-finite"), std::string::npos);
    }
  }
  // fp16 overflow: 1e6 becomes Inf on the wire and is rejected.
  auto fp16 = Make(Kind(CodecKind::kFp16));
  std::vector<float> big(4, 1e6f);
  std::vector<std::byte> bytes;
  ASSERT_TRUE(fp16->Encode(big, 0, &bytes).ok());
  std::vector<float> out(4);
  EXPECT_TRUE(IsNonFiniteRejection(fp16->Decode(bytes, out)));
}

}  // namespace
}  // namespace chorus::gossip
