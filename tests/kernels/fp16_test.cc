// FP16 <-> FP32 array conversion: the F16C path against the portable path (the
// scalar reference in common/fp16.h), bit for bit on every non-NaN input:
// all 65536 half values, every 97th float bit pattern, and the boundary cases
// (zeros, subnormals, the rounding midpoint between every pair of adjacent
// halves and its neighbours, 65504, 65520, Inf). NaN must stay NaN on both.
// The F16C comparisons skip on a CPU without F16C/AVX2.
#include "common/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

bool IsHalfNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

class Fp16Conversion : public ::testing::TestWithParam<HalfConversion> {
 protected:
  // The parameter is the vector path under test: kBest (AVX-512 where the CPU
  // has it) or kF16c (F16C/AVX2); each is compared with the portable code.
  void SetUp() override { fast_ = GetParam(); }
  void TearDown() override { LimitHalfConversion(HalfConversion::kBest); }

  // Skips the test unless this parameter's fast path exists on this CPU.
  bool HaveF16c() const {
    LimitHalfConversion(fast_);
    const std::string name = HalfConversionPath();
    const bool have = fast_ == HalfConversion::kF16c ? name == "f16c" : name == "avx512";
    // (kBest on a CPU with F16C but not AVX-512 is the kF16c case, tested there.)
    LimitHalfConversion(HalfConversion::kBest);
    return have;
  }

  std::vector<float> ToFloat(const std::vector<uint16_t>& in, bool portable) const {
    LimitHalfConversion(portable ? HalfConversion::kPortable : fast_);
    std::vector<float> out(in.size());
    HalfToFloat(in.data(), out.data(), in.size());
    LimitHalfConversion(HalfConversion::kBest);
    return out;
  }

  std::vector<uint16_t> ToHalf(const std::vector<float>& in, bool portable) const {
    LimitHalfConversion(portable ? HalfConversion::kPortable : fast_);
    std::vector<uint16_t> out(in.size());
    FloatToHalf(in.data(), out.data(), in.size());
    LimitHalfConversion(HalfConversion::kBest);
    return out;
  }

  HalfConversion fast_ = HalfConversion::kBest;

  // Both paths agree bit for bit on non-NaN inputs and give NaN for NaN.
  // Plain loop, first mismatch reported: this runs over tens of millions.
  void ExpectPathsAgree(const std::vector<float>& in) const {
    const auto fast = ToHalf(in, false);
    const auto portable = ToHalf(in, true);
    for (size_t i = 0; i < in.size(); ++i) {
      const bool agree = std::isnan(in[i]) ? IsHalfNan(fast[i]) && IsHalfNan(portable[i])
                                           : fast[i] == portable[i];
      if (!agree) {
        FAIL() << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]) << ": f16c 0x"
               << fast[i] << ", portable 0x" << portable[i];
      }
    }
  }
};

TEST_P(Fp16Conversion, LimitSwitchesPath) {
  LimitHalfConversion(HalfConversion::kPortable);
  EXPECT_STREQ(HalfConversionPath(), "portable");
  LimitHalfConversion(HalfConversion::kF16c);
  const std::string capped = HalfConversionPath();
  EXPECT_TRUE(capped == "f16c" || capped == "portable") << capped;
  LimitHalfConversion(HalfConversion::kBest);
  const std::string best = HalfConversionPath();
  EXPECT_TRUE(best == "avx512" || best == "f16c" || best == "portable") << best;
}

TEST_P(Fp16Conversion, EveryHalfToFloatMatchesPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks this path";
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<uint16_t>(h);
  const auto fast = ToFloat(all, false);
  const auto portable = ToFloat(all, true);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (IsHalfNan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(fast[h]) && std::isnan(portable[h])) << std::hex << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(fast[h]), std::bit_cast<uint32_t>(portable[h]))
        << "half bits 0x" << std::hex << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(portable[h]),
              std::bit_cast<uint32_t>(HalfBitsToFloat(static_cast<uint16_t>(h))));
  }
}

TEST_P(Fp16Conversion, StridedFloatSweepMatchesPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks this path";
  // Every 97th bit pattern over all 2^32, in blocks whose length is not a
  // multiple of the vector width (tails) and is above the parallel threshold.
  constexpr uint64_t kStride = 97;
  constexpr size_t kBlock = (size_t{1} << 20) + 5;
  std::vector<float> block;
  block.reserve(kBlock);
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
    block.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    if (block.size() == kBlock) {
      ExpectPathsAgree(block);
      if (HasFatalFailure()) return;
      block.clear();
    }
  }
  ExpectPathsAgree(block);
}

TEST_P(Fp16Conversion, BoundaryFloatsMatchPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks this path";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(),
                              std::ldexp(1.0f, -25),
                              std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                              std::ldexp(3.0f, -26),
                              std::ldexp(1.0f, -24),
                              std::ldexp(1.0f, -14),
                              std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                              65504.0f,
                              65519.996f,
                              65520.0f,
                              65536.0f,
                              std::numeric_limits<float>::max(),
                              inf,
                              -inf,
                              std::nanf(""),
                              -std::nanf(""),
                              std::bit_cast<float>(0x7f800001u),
                              std::bit_cast<float>(0xffbfffffu),
                              1.0f + std::ldexp(1.0f, -11),
                              1.0f + 3 * std::ldexp(1.0f, -11)};
  // For every pair of adjacent finite halves: the exact midpoint (a rounding
  // tie) and the floats just below and above it, with both signs.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = HalfBitsToFloat(static_cast<uint16_t>(h));
    const float hi = HalfBitsToFloat(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: 12 significant bits
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf)}) {
      cases.push_back(v);
      cases.push_back(-v);
    }
  }
  ExpectPathsAgree(cases);
}

TEST_P(Fp16Conversion, ShortArraysUseTailsCorrectly) {
  // Lengths 0..35 cover the 16- and 8-lane loops and every tail length; the
  // reference is the scalar code on each path.
  for (bool portable : {false, true}) {
    for (size_t count = 0; count < 36; ++count) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = 0.1f * static_cast<float>(i) - 0.77f;
      const auto half = ToHalf(in, portable);
      const auto back = ToFloat(half, portable);
      std::vector<float> rounded = in, copied(count), scaled = in, kept(count);
      std::vector<uint16_t> kept_bits(count);
      LimitHalfConversion(portable ? HalfConversion::kPortable : fast_);
      RoundToHalf(rounded.data(), rounded.size());
      RoundToHalf(in.data(), copied.data(), count);
      RoundToHalfScaled(scaled.data(), count, 0.3f);
      RoundToHalfKeepBits(in.data(), kept.data(), kept_bits.data(), count);
      LimitHalfConversion(HalfConversion::kBest);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(half[i], FloatToHalfBits(in[i])) << count << " " << i;
        ASSERT_EQ(back[i], HalfBitsToFloat(half[i])) << count << " " << i;
        ASSERT_EQ(rounded[i], back[i]) << count << " " << i;
        ASSERT_EQ(copied[i], back[i]) << count << " " << i;
        ASSERT_EQ(scaled[i], back[i] * 0.3f) << count << " " << i;
        ASSERT_EQ(kept[i], back[i]) << count << " " << i;
        ASSERT_EQ(kept_bits[i], half[i]) << count << " " << i;
      }
    }
  }
}

TEST_P(Fp16Conversion, RoundToHalfOnLargeArray) {
  // Above the parallel threshold, on this parameter's path.
  LimitHalfConversion(fast_);
  const size_t count = (size_t{1} << 19) + 3;
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(i) * 0.37f - 7000.0f;
  const std::vector<float> original = x;
  RoundToHalf(x.data(), count);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(x[i], HalfBitsToFloat(FloatToHalfBits(original[i]))) << i;
  }
}

TEST_P(Fp16Conversion, FusedRoundingsMatchTheirSteps) {
  // RoundToHalfScaled and RoundToHalfKeepBits above the parallel threshold, on
  // this parameter's path, over values that overflow, go subnormal and are
  // not finite: each equals rounding, then scaling or keeping the bits.
  LimitHalfConversion(fast_);
  const size_t count = (size_t{1} << 17) + 5;
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = std::ldexp(static_cast<float>(i % 1999) - 999.5f, static_cast<int>(i % 47) - 30);
  }
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = -std::numeric_limits<float>::infinity();
  x[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> original = x;
  std::vector<float> kept(count);
  std::vector<uint16_t> bits(count);
  RoundToHalfKeepBits(original.data(), kept.data(), bits.data(), count);
  RoundToHalfScaled(x.data(), count, 1.0f / 1024.0f);
  for (size_t i = 0; i < count; ++i) {
    const uint16_t h = FloatToHalfBits(original[i]);
    if (std::isnan(original[i])) {
      ASSERT_TRUE(std::isnan(x[i]) && std::isnan(kept[i])) << i;
      continue;
    }
    ASSERT_EQ(bits[i], h) << i;
    ASSERT_EQ(kept[i], HalfBitsToFloat(h)) << i;
    ASSERT_EQ(x[i], HalfBitsToFloat(h) / 1024.0f) << i;
  }
  LimitHalfConversion(HalfConversion::kBest);
}

TEST_P(Fp16Conversion, AddHalvesMatchesConvertAddRound) {
  // Every pair of a spread of FP16 values (both signs, subnormals, values that
  // overflow when added, +-Inf, NaN), at lengths that leave every tail.
  std::vector<uint16_t> values;
  for (uint32_t h = 0; h < 0x10000; h += 97) values.push_back(static_cast<uint16_t>(h));
  for (uint16_t h : {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00}) {
    values.push_back(h);
  }
  std::vector<uint16_t> acc, in;
  for (uint16_t a : values) {
    for (size_t k = 0; k < values.size(); k += 7) {
      acc.push_back(a);
      in.push_back(values[(k + a) % values.size()]);
    }
  }
  for (const HalfConversion path : {fast_, HalfConversion::kPortable}) {
    LimitHalfConversion(path);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{17}, acc.size()}) {
      std::vector<uint16_t> got(acc.begin(), acc.begin() + count);
      AddHalves(got.data(), in.data(), count);
      for (size_t i = 0; i < count; ++i) {
        const float sum = HalfBitsToFloat(acc[i]) + HalfBitsToFloat(in[i]);
        if (std::isnan(sum)) {
          ASSERT_TRUE(std::isnan(HalfBitsToFloat(got[i]))) << i;
        } else {
          ASSERT_EQ(got[i], FloatToHalfBits(sum)) << HalfConversionPath() << " " << i << ": "
                                                  << acc[i] << " + " << in[i];
        }
      }
    }
  }
  LimitHalfConversion(HalfConversion::kBest);
}

INSTANTIATE_TEST_SUITE_P(Paths, Fp16Conversion,
                         ::testing::Values(HalfConversion::kBest, HalfConversion::kF16c),
                         [](const auto& info) {
                           return info.param == HalfConversion::kBest ? "Best" : "F16c";
                         });

}  // namespace
}  // namespace chorus::kernels
