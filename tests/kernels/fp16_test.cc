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

class Fp16Conversion : public ::testing::Test {
 protected:
  void TearDown() override { ForcePortableHalfConversion(false); }

  // Skips the test unless the fast path is available.
  static bool HaveF16c() {
    ForcePortableHalfConversion(false);
    return std::string(HalfConversionPath()) == "f16c";
  }

  static std::vector<float> ToFloat(const std::vector<uint16_t>& in, bool portable) {
    ForcePortableHalfConversion(portable);
    std::vector<float> out(in.size());
    HalfToFloat(in.data(), out.data(), in.size());
    ForcePortableHalfConversion(false);
    return out;
  }

  static std::vector<uint16_t> ToHalf(const std::vector<float>& in, bool portable) {
    ForcePortableHalfConversion(portable);
    std::vector<uint16_t> out(in.size());
    FloatToHalf(in.data(), out.data(), in.size());
    ForcePortableHalfConversion(false);
    return out;
  }

  // Both paths agree bit for bit on non-NaN inputs and give NaN for NaN.
  // Plain loop, first mismatch reported: this runs over tens of millions.
  static void ExpectPathsAgree(const std::vector<float>& in) {
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

TEST_F(Fp16Conversion, ForcePortableSwitchesPath) {
  ForcePortableHalfConversion(true);
  EXPECT_STREQ(HalfConversionPath(), "portable");
  ForcePortableHalfConversion(false);
  const std::string path = HalfConversionPath();
  EXPECT_TRUE(path == "f16c" || path == "portable") << path;
}

TEST_F(Fp16Conversion, EveryHalfToFloatMatchesPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks F16C/AVX2";
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

TEST_F(Fp16Conversion, StridedFloatSweepMatchesPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks F16C/AVX2";
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

TEST_F(Fp16Conversion, BoundaryFloatsMatchPortable) {
  if (!HaveF16c()) GTEST_SKIP() << "CPU lacks F16C/AVX2";
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

TEST_F(Fp16Conversion, ShortArraysUseTailsCorrectly) {
  // Lengths 0..19 cover the 16- and 8-lane loops and every tail length; the
  // reference is the scalar code on each path.
  for (bool portable : {false, true}) {
    for (size_t count = 0; count < 20; ++count) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = 0.1f * static_cast<float>(i) - 0.77f;
      const auto half = ToHalf(in, portable);
      const auto back = ToFloat(half, portable);
      std::vector<float> rounded = in;
      ForcePortableHalfConversion(portable);
      RoundToHalf(rounded.data(), rounded.size());
      ForcePortableHalfConversion(false);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(half[i], FloatToHalfBits(in[i])) << count << " " << i;
        ASSERT_EQ(back[i], HalfBitsToFloat(half[i])) << count << " " << i;
        ASSERT_EQ(rounded[i], back[i]) << count << " " << i;
      }
    }
  }
}

TEST_F(Fp16Conversion, RoundToHalfOnLargeArray) {
  // Above the parallel threshold, on whichever path is in use.
  const size_t count = (size_t{1} << 19) + 3;
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(i) * 0.37f - 7000.0f;
  const std::vector<float> original = x;
  RoundToHalf(x.data(), count);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(x[i], HalfBitsToFloat(FloatToHalfBits(original[i]))) << i;
  }
}

}  // namespace
}  // namespace chorus::kernels
