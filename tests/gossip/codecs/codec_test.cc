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
  std::vector<CodecOptions> all = {Kind(CodecKind::kNone), Kind(CodecKind::kFp16), int8, int8s,
                                   sign, topk, randk};
  for (int bits : {16, 8}) {
    for (CodecOptions sparse : {topk, randk}) {
      sparse.value_bits = bits;
      all.push_back(sparse);
    }
  }
  return all;
}

CodecOptions Sparse(CodecKind kind, double ratio, int value_bits) {
  CodecOptions o = Kind(kind);
  o.ratio = ratio;
  o.value_bits = value_bits;
  return o;
}

constexpr CodecKind kSparseKinds[] = {CodecKind::kTopK, CodecKind::kRandomK};

// Byte offset of the values block in a top-k or random-k message keeping k values:
// after the header and u64 k, top-k has k u32 indices, random-k a u64 seed.
size_t ValuesOffset(CodecKind kind, size_t k) {
  return kind == CodecKind::kTopK ? 16 + 8 + 4 * k : 16 + 16;
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

TEST(CodecTest, ValidatesSparseValueBits) {
  for (CodecKind kind : kSparseKinds) {
    for (int bits : {32, 16, 8}) {
      EXPECT_TRUE(ValidateCodecOptions(Sparse(kind, 0.1, bits)).ok()) << bits;
    }
    for (int bits : {0, 1, 4, 12, 24, 64, -8}) {
      const CodecOptions bad = Sparse(kind, 0.1, bits);
      const Status s = ValidateCodecOptions(bad);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bits;
      EXPECT_NE(s.message().find("value_bits"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("32, 16 or 8"), std::string::npos) << s.message();
      EXPECT_FALSE(MakeCodec(bad).has_value()) << bits;
    }
  }
  // The dense kinds do not use value_bits.
  CodecOptions int8 = Kind(CodecKind::kInt8);
  int8.value_bits = 4;
  EXPECT_TRUE(ValidateCodecOptions(int8).ok());
}

TEST(CodecTest, SparseWireBytesAreExactForEachValueWidth) {
  for (CodecKind kind : kSparseKinds) {
    for (int bits : {32, 16, 8}) {
      auto codec = Make(Sparse(kind, 0.05, bits));
      for (size_t n : {0u, 1u, 7u, 100u, 1001u}) {
        const size_t k = SparseCount(0.05, n);
        const size_t values = bits == 32 ? 4 * k : bits == 16 ? 2 * k : 4 + k;
        const size_t expected = ValuesOffset(kind, k) + values;
        EXPECT_EQ(codec->WireBytes(n), expected) << codec->Describe() << " n=" << n;
        std::vector<std::byte> bytes;
        ASSERT_TRUE(codec->Encode(RandomVector(14, 0, n), 5, &bytes).ok());
        ASSERT_EQ(bytes.size(), expected) << codec->Describe() << " n=" << n;
        uint16_t param = 0;
        std::memcpy(&param, bytes.data() + 2, 2);
        EXPECT_EQ(param, bits == 32 ? 0 : bits) << codec->Describe();
      }
    }
  }
}

TEST(CodecTest, SparseThirtyTwoBitValuesKeepTheF32Format) {
  // The byte layout of codec.h, built by hand: header, u64 k, then u32 indices
  // (top-k) or the u64 seed (random-k), then k f32 values.
  auto put = [](std::vector<std::byte>* out, const void* p, size_t size) {
    const auto* b = static_cast<const std::byte*>(p);
    out->insert(out->end(), b, b + size);
  };
  const auto x = RandomVector(15, 0, 40, 1.0, 2.0);  // no zeros: kept entries are visible
  const uint64_t n = x.size();
  const uint64_t seed = 77;
  for (CodecKind kind : kSparseKinds) {
    auto codec = Make(Sparse(kind, 0.1, 32));
    EXPECT_EQ(codec->Describe().find("bit"), std::string::npos) << codec->Describe();
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, seed, &bytes).ok());
    const auto y = Decode(*codec, bytes, x.size());
    std::vector<uint32_t> kept;
    for (uint32_t i = 0; i < n; ++i) {
      if (y[i] != 0.0f) kept.push_back(i);
    }
    const uint64_t k = kept.size();
    ASSERT_EQ(k, 4u);  // ceil(0.1 * 40)
    std::vector<std::byte> expected;
    const uint8_t start[4] = {0xC7, static_cast<uint8_t>(kind), 0, 0};
    const uint32_t reserved = 0;
    put(&expected, start, 4);
    put(&expected, &reserved, 4);
    put(&expected, &n, 8);
    put(&expected, &k, 8);
    if (kind == CodecKind::kTopK) {
      for (uint32_t i : kept) put(&expected, &i, 4);
    } else {
      put(&expected, &seed, 8);
    }
    for (uint32_t i : kept) put(&expected, &x[i], 4);
    EXPECT_EQ(bytes, expected) << codec->Describe();
  }
}

// Encodes x with the `bits`-wide codec of `kind` and `ratio` into *bytes and
// returns the decoded vector; *kept gets the kept set, read off the 32-bit codec
// of the same kind, ratio and seed (the width does not change which are kept).
std::vector<float> SparseRoundTrip(CodecKind kind, double ratio, int bits,
                                   const std::vector<float>& x, uint64_t seed,
                                   std::vector<bool>* kept, std::vector<std::byte>* bytes) {
  auto exact = Make(Sparse(kind, ratio, 32));
  std::vector<std::byte> exact_bytes;
  EXPECT_TRUE(exact->Encode(x, seed, &exact_bytes).ok());
  const auto y32 = Decode(*exact, exact_bytes, x.size());
  kept->assign(x.size(), false);
  for (size_t i = 0; i < x.size(); ++i) (*kept)[i] = y32[i] != 0.0f;
  auto codec = Make(Sparse(kind, ratio, bits));
  EXPECT_TRUE(codec->Encode(x, seed, bytes).ok());
  return Decode(*codec, *bytes, x.size());
}

TEST(CodecTest, SparseFp16ValuesErrByAtMostTwoToMinusEleven) {
  // Magnitudes 1e-4 .. 1e4, inside fp16's normal range, as in the fp16 test:
  // round to nearest with 10 stored mantissa bits errs by at most 2^-11 relative.
  std::vector<float> x(2000);
  SplitMix64 rng(16);
  for (auto& v : x) {
    v = static_cast<float>(std::pow(10.0, 4.0 * rng.Symmetric()) * (rng.Next() & 1 ? 1 : -1));
  }
  for (CodecKind kind : kSparseKinds) {
    for (double ratio : {0.01, 0.1, 1.0}) {
      SCOPED_TRACE(std::string(CodecKindName(kind)) + " ratio " + std::to_string(ratio));
      EXPECT_NE(Make(Sparse(kind, ratio, 16))->Describe().find("16-bit values"),
                std::string::npos);
      std::vector<bool> kept;
      std::vector<std::byte> bytes;
      const auto y = SparseRoundTrip(kind, ratio, 16, x, 21, &kept, &bytes);
      size_t count = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!kept[i]) {
          ASSERT_EQ(y[i], 0.0f) << i;
          continue;
        }
        ++count;
        EXPECT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -11)) << x[i];
      }
      EXPECT_EQ(count, SparseCount(ratio, x.size()));
    }
  }
  // A kept value beyond 65504 becomes Inf on the wire and is rejected.
  auto codec = Make(Sparse(CodecKind::kTopK, 0.5, 16));
  std::vector<float> big = {1.0f, 1e6f, 2.0f, 3.0f};
  std::vector<std::byte> bytes;
  ASSERT_TRUE(codec->Encode(big, 0, &bytes).ok());
  std::vector<float> out(big.size());
  EXPECT_TRUE(IsNonFiniteRejection(codec->Decode(bytes, out)));
}

TEST(CodecTest, SparseInt8ValuesErrByAtMostHalfTheScale) {
  for (CodecKind kind : kSparseKinds) {
    // 0.01 with 8-bit values: top-k 1% with one byte per value.
    for (double ratio : {0.01, 0.1, 1.0}) {
      SCOPED_TRACE(std::string(CodecKindName(kind)) + " ratio " + std::to_string(ratio));
      auto codec = Make(Sparse(kind, ratio, 8));
      EXPECT_NE(codec->Describe().find("8-bit values"), std::string::npos) << codec->Describe();
      const auto x = RandomVector(17, 0, 1003, -3.0, 3.0);
      std::vector<bool> kept;
      std::vector<std::byte> bytes;
      const auto y = SparseRoundTrip(kind, ratio, 8, x, 22, &kept, &bytes);
      float max_abs = 0.0f;
      for (size_t i = 0; i < x.size(); ++i) {
        if (kept[i]) max_abs = std::max(max_abs, std::fabs(x[i]));
      }
      const float scale = max_abs / 127.0f;
      const size_t k = SparseCount(ratio, x.size());
      float wire_scale = 0.0f;
      std::memcpy(&wire_scale, bytes.data() + ValuesOffset(kind, k), 4);
      EXPECT_EQ(wire_scale, scale);
      for (size_t i = 0; i < x.size(); ++i) {
        if (!kept[i]) {
          ASSERT_EQ(y[i], 0.0f) << i;
          continue;
        }
        // scale/2 from rounding q; plus one float rounding of q * scale (2^-24 relative).
        EXPECT_LE(std::fabs(y[i] - x[i]), scale / 2 + std::ldexp(std::fabs(y[i]), -24)) << i;
      }
    }
  }
}

TEST(CodecTest, SparseInt8ZeroScaleDecodesToZeros) {
  for (CodecKind kind : kSparseKinds) {
    auto codec = Make(Sparse(kind, 0.2, 8));
    const std::vector<float> x(50, 0.0f);
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, 3, &bytes).ok());
    float wire_scale = -1.0f;
    std::memcpy(&wire_scale, bytes.data() + ValuesOffset(kind, SparseCount(0.2, x.size())), 4);
    EXPECT_EQ(wire_scale, 0.0f);
    std::vector<float> out(x.size(), 5.0f);
    ASSERT_TRUE(codec->Decode(bytes, out).ok()) << codec->Describe();
    for (float v : out) ASSERT_EQ(v, 0.0f);
  }
}

TEST(CodecTest, SparseDecodeRejectsAnotherValueWidth) {
  const auto x = RandomVector(18, 0, 100);
  for (CodecKind kind : kSparseKinds) {
    const std::string name(CodecKindName(kind));
    for (int sent : {32, 16, 8}) {
      auto encoder = Make(Sparse(kind, 0.1, sent));
      std::vector<std::byte> bytes;
      ASSERT_TRUE(encoder->Encode(x, 4, &bytes).ok());
      for (int expected : {32, 16, 8}) {
        auto decoder = Make(Sparse(kind, 0.1, expected));
        std::vector<float> out(x.size());
        const Status s = decoder->Decode(bytes, out);
        if (sent == expected) {
          EXPECT_TRUE(s.ok()) << s.ToString();
          continue;
        }
        EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
        EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
        EXPECT_NE(s.message().find(std::to_string(sent) + "-bit values"), std::string::npos)
            << s.message();
        EXPECT_NE(s.message().find("expects " + std::to_string(expected) + "-bit values"),
                  std::string::npos)
            << s.message();
      }
      // A width code that no codec writes (32 itself travels as 0).
      for (uint16_t code : {uint16_t{5}, uint16_t{32}}) {
        auto unknown = bytes;
        std::memcpy(unknown.data() + 2, &code, 2);
        std::vector<float> out(x.size());
        const Status s = encoder->Decode(unknown, out);
        EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
        EXPECT_NE(s.message().find("unknown value width"), std::string::npos) << s.message();
      }
    }
  }
}

// Sender and receiver quantize with one chunk length: a message cut in other
// chunks is refused (it once decoded at a size WireBytes does not give).
TEST(CodecTest, ChunkedDecodeRejectsAnotherChunk) {
  const auto x = RandomVector(19, 0, 50);
  for (CodecKind kind : {CodecKind::kInt8, CodecKind::kSign}) {
    const std::string name(CodecKindName(kind));
    CodecOptions sent = Kind(kind);
    sent.chunk = 7;
    auto encoder = Make(sent);
    std::vector<std::byte> bytes;
    ASSERT_TRUE(encoder->Encode(x, 1, &bytes).ok());
    for (int chunk : {7, 6, 50}) {
      CodecOptions expected = Kind(kind);
      expected.chunk = chunk;
      std::vector<float> out(x.size());
      const Status s = Make(expected)->Decode(bytes, out);
      if (chunk == 7) {
        EXPECT_TRUE(s.ok()) << s.ToString();
        continue;
      }
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
      EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("chunks of 7 elements but the receiver expects " +
                                 std::to_string(chunk)),
                std::string::npos)
          << s.message();
    }
  }
  // The fuzzer's input: a 2-element sign message in chunks of 1 (two scales),
  // 25 bytes, offered to a decoder with chunks of 22 (one scale, 21 bytes).
  CodecOptions sign = Kind(CodecKind::kSign);
  sign.chunk = 22;
  const unsigned char wire[] = {0xc7, static_cast<unsigned char>(CodecKind::kSign), 0, 0, 0, 0, 0, 0,
                                2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x63, 0, 0, 0};
  std::vector<float> out(2);
  const Status s = Make(sign)->Decode(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(wire), sizeof(wire)), out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
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

// A sparse message that keeps another number of elements than the codec's
// ratio gives (a peer with another ratio, or a corrupt count), even one whose
// size is right for its own count, is refused. Found by fuzz_codec: k = 0 of
// 1024 elements decoded to zeros.
TEST(CodecTest, SparseDecodeRefusesAnotherKeptCount) {
  for (CodecKind kind : {CodecKind::kTopK, CodecKind::kRandomK}) {
    CodecOptions o;
    o.kind = kind;
    o.ratio = 0.05;
    auto codec = Make(o);
    CodecOptions other = o;
    other.ratio = 0.1;
    auto wider = Make(other);
    const auto x = RandomVector(21, 0, 1024);
    std::vector<std::byte> bytes;
    ASSERT_TRUE(wider->Encode(x, 3, &bytes).ok());
    std::vector<float> out(x.size());
    const Status s = codec->Decode(bytes, out);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("kept elements of 1024, expected 52"), std::string::npos) << s.ToString();
    std::vector<std::byte> none(bytes.begin(), bytes.begin() + 24);  // header and k
    std::memset(none.data() + 16, 0, 8);                              // k = 0
    if (kind == CodecKind::kRandomK) none.resize(32, std::byte{0});    // and a seed
    EXPECT_EQ(codec->Decode(none, out).code(), StatusCode::kDataLoss);
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
  for (CodecKind kind : kSparseKinds) {
    auto codec = Make(Sparse(kind, 0.5, 8));
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(RandomVector(19, 0, 10), 0, &bytes).ok());
    const size_t at = ValuesOffset(kind, 5);
    std::vector<float> out(10);
    auto minus128 = bytes;
    minus128[at + 4 + 2] = static_cast<std::byte>(0x80);  // q = -128
    EXPECT_EQ(codec->Decode(minus128, out).code(), StatusCode::kDataLoss) << codec->Describe();
    auto negative = bytes;
    const float minus_one = -1.0f;
    std::memcpy(negative.data() + at, &minus_one, 4);
    EXPECT_EQ(codec->Decode(negative, out).code(), StatusCode::kDataLoss) << codec->Describe();
    auto infinite = bytes;
    const float inf = INFINITY;
    std::memcpy(infinite.data() + at, &inf, 4);
    EXPECT_TRUE(IsNonFiniteRejection(codec->Decode(infinite, out))) << codec->Describe();
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

// The finite check scans the whole message at once (kernels::AllFinite), then
// searches it only on a failure: it names the first bad value, wherever it is.
TEST(CodecTest, NamesTheFirstNonFiniteElementInAnyBlock) {
  auto codec = Make(Kind(CodecKind::kNone));
  const size_t n = 3000;  // two whole blocks and part of a third
  for (size_t at : {size_t{0}, size_t{1023}, size_t{1024}, size_t{2047}, size_t{2999}}) {
    auto x = RandomVector(14, 0, n);
    x[at] = NAN;
    if (at + 5 < n) x[at + 5] = INFINITY;  // a later one is not the one named
    std::vector<std::byte> bytes;
    ASSERT_TRUE(codec->Encode(x, 0, &bytes).ok());
    std::vector<float> out(n);
    const Status s = codec->Decode(bytes, out);
    EXPECT_TRUE(IsNonFiniteRejection(s)) << at;
    EXPECT_NE(s.message().find("at element " + std::to_string(at)), std::string::npos) << s.ToString();
  }
  std::vector<std::byte> bytes;
  ASSERT_TRUE(codec->Encode(RandomVector(15, 0, n), 0, &bytes).ok());
  std::vector<float> out(n);
  EXPECT_TRUE(codec->Decode(bytes, out).ok());
}

}  // namespace
}  // namespace chorus::gossip
