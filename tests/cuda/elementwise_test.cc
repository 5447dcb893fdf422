// The element-wise CUDA ops (kernels/cuda/elementwise.cu) against the CPU
// reference: casts bit for bit over special values (Inf, NaN, subnormals,
// halfway cases, 65504 / 65520) and every FP16 pattern; ReLU, max-pooling and
// gradient unscaling bit for bit; softmax cross-entropy to the last bits of
// exp / log. Odd sizes (1, tails after the 4-wide vector path, misaligned
// pointers that force the scalar path) throughout. Skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/fp16.h"
#include "kernels/cuda/ops.h"
#include "kernels/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace chorus::kernels::cuda {
namespace {

using testing::GpuTest;
using testing::RandomHalfValues;
using testing::ToFloat;
using testing::ToHalf;

constexpr float kElementwiseInf = std::numeric_limits<float>::infinity();

float FromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
bool IsHalfNan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

// got == want element for element (integers or bit patterns); reports the first misses.
template <typename T>
::testing::AssertionResult SameBits(const std::vector<T>& got, const std::vector<T>& want,
                                    const std::vector<float>* inputs = nullptr) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs "
                                         << want.size();
  }
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (bad < 5) {
        first += " [" + std::to_string(i) + "]";
        if (inputs != nullptr) first += " in " + Hex(Bits((*inputs)[i]));
        first += " got " + Hex(static_cast<uint32_t>(got[i])) + " want " +
                 Hex(static_cast<uint32_t>(want[i])) + ";";
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << first;
}

std::vector<uint32_t> FloatBits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = Bits(v[i]);
  return b;
}

// FP16 bits of CPU float results that hold FP16 values (exact round trip).
std::vector<uint16_t> PortableHalfBits(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToHalfBits(v[i]);
  return h;
}

// Floats that exercise every branch of FP32 -> FP16 rounding: signed zeros,
// the subnormal range and its halfway points, the normal halfway points of
// every FP16 value (and their FP32 neighbours, which must round away from the
// tie), the overflow edge (65504 stays, 65520 and above become Inf), Inf, and
// quiet and signalling NaNs with payloads. Then random FP32 bit patterns.
std::vector<float> CastInputs() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          -65504.0f,
                          std::nextafter(65520.0f, 0.0f),
                          65520.0f,
                          -65520.0f,
                          65536.0f,
                          1e10f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::ldexp(1.0f, -14),          // smallest FP16 normal
                          std::ldexp(1.0f, -24),          // smallest FP16 subnormal
                          std::ldexp(1.0f, -25),          // its half: ties to 0
                          std::nextafter(std::ldexp(1.0f, -25), 1.0f),  // rounds up
                          std::ldexp(3.0f, -25),          // 1.5 units: ties to 2
                          std::ldexp(5.0f, -25),          // 2.5 units: ties to 2
                          std::ldexp(1023.5f, -24),       // top subnormal tie -> normal
                          kElementwiseInf,
                          -kElementwiseInf,
                          FromBits(0x7fc00000u),
                          FromBits(0xffc00000u),
                          FromBits(0x7f800001u),  // signalling, payload below FP16's reach
                          FromBits(0x7fa00000u),  // signalling, payload in reach
                          FromBits(0xff812345u),
                          FromBits(0x7fffffffu)};
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const double lo = HalfBitsToFloat(static_cast<uint16_t>(h | sign));
      const double hi = HalfBitsToFloat(static_cast<uint16_t>((h + 1) | sign));
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, 2.0f * mid));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) v.push_back(FromBits(static_cast<uint32_t>(rng())));
  return v;
}

class CudaElementwiseTest : public GpuTest {
 protected:
  // A device copy of `host` starting `shift` elements into its allocation (a
  // shift of 1 misaligns the pointer for the vector path).
  template <typename T>
  DeviceArray<T> UploadShifted(const std::vector<T>& host, size_t shift) {
    auto array = DeviceArray<T>::Create(device(), host.size() + shift);
    EXPECT_TRUE(array.has_value());
    EXPECT_TRUE(
        device().CopyToDevice(array->data() + shift, host.data(), host.size() * sizeof(T)).ok());
    return std::move(*array);
  }
  template <typename T>
  std::vector<T> DownloadShifted(const DeviceArray<T>& array, size_t shift) {
    std::vector<T> all = Download(array);
    return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(shift), all.end());
  }
};

// ---- Casts ----------------------------------------------------------------------

TEST_F(CudaElementwiseTest, FloatToHalfIsBitExact) {
  const std::vector<float> all = CastInputs();
  // Counts below, at and above the 4-wide vector groups, and the whole set.
  for (const size_t count : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{30}, all.size()}) {
    const std::vector<float> x(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count));
    std::vector<uint16_t> portable = PortableHalfBits(x);
    std::vector<uint16_t> runtime(count);
    kernels::FloatToHalf(x.data(), runtime.data(), count);
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto dx = UploadShifted(x, shift);
      auto dy = UploadShifted(std::vector<uint16_t>(count, 0x5555u), shift);
      ASSERT_TRUE(FloatToHalf(device(), dx.data() + shift, dy.data() + shift, count).ok());
      const std::vector<uint16_t> got = DownloadShifted(dy, shift);
      // Bit for bit with common/fp16.h, NaN payloads included.
      EXPECT_TRUE(SameBits(got, portable, &x));
      // And with the CPU op in use (F16C or portable) on every non-NaN input.
      for (size_t i = 0; i < count; ++i) {
        if (std::isnan(x[i])) {
          EXPECT_TRUE(IsHalfNan(got[i])) << i;
        } else {
          ASSERT_EQ(got[i], runtime[i]) << "input " << Hex(Bits(x[i]));
        }
      }
    }
  }
}

TEST_F(CudaElementwiseTest, HalfToFloatIsExactOnEveryPattern) {
  std::vector<uint16_t> h(65536);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  for (const size_t count : {size_t{1}, size_t{7}, h.size()}) {
    const std::vector<uint16_t> x(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(count));
    std::vector<uint32_t> portable(count);
    for (size_t i = 0; i < count; ++i) portable[i] = Bits(HalfBitsToFloat(x[i]));
    const std::vector<float> runtime = ToFloat(x);
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto dx = UploadShifted(x, shift);
      auto dy = UploadShifted(std::vector<float>(count, -3.0f), shift);
      ASSERT_TRUE(HalfToFloat(device(), dx.data() + shift, dy.data() + shift, count).ok());
      const std::vector<float> got = DownloadShifted(dy, shift);
      EXPECT_TRUE(SameBits(FloatBits(got), portable));
      for (size_t i = 0; i < count; ++i) {
        if (IsHalfNan(x[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << i;
        } else {
          ASSERT_EQ(Bits(got[i]), Bits(runtime[i])) << "half " << Hex(x[i]);
        }
      }
    }
  }
}

TEST_F(CudaElementwiseTest, RoundToHalfGivesBitsAndExpansion) {
  const std::vector<float> all = CastInputs();
  for (const size_t count : {size_t{2}, size_t{9}, all.size()}) {
    const std::vector<float> x(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count));
    const std::vector<uint16_t> want_half = PortableHalfBits(x);
    std::vector<uint32_t> want_float(count);
    for (size_t i = 0; i < count; ++i) want_float[i] = Bits(HalfBitsToFloat(want_half[i]));
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto dx = UploadShifted(x, shift);
      auto dh = UploadShifted(std::vector<uint16_t>(count, 0x5555u), shift);
      auto df = UploadShifted(std::vector<float>(count, -3.0f), shift);
      ASSERT_TRUE(RoundToHalf(device(), dx.data() + shift, dh.data() + shift, df.data() + shift,
                              count)
                      .ok());
      EXPECT_TRUE(SameBits(DownloadShifted(dh, shift), want_half, &x));
      EXPECT_TRUE(SameBits(FloatBits(DownloadShifted(df, shift)), want_float));
      // In place: y_float aliases x.
      ASSERT_TRUE(RoundToHalf(device(), dx.data() + shift, dh.data() + shift, dx.data() + shift,
                              count)
                      .ok());
      EXPECT_TRUE(SameBits(FloatBits(DownloadShifted(dx, shift)), want_float));
    }
  }
  // The CPU op agrees on non-NaN inputs.
  std::vector<float> cpu = all;
  kernels::RoundToHalf(cpu.data(), cpu.size());
  for (size_t i = 0; i < all.size(); ++i) {
    if (!std::isnan(all[i])) {
      ASSERT_EQ(Bits(cpu[i]), Bits(HalfBitsToFloat(FloatToHalfBits(all[i])))) << i;
    }
  }
}

// ---- ReLU ----------------------------------------------------------------------------

// FP16 values with the special ones ReLU must pass or zero: signed zeros,
// subnormals, Inf, quiet NaN.
std::vector<float> ReluInputs(size_t count, uint32_t seed) {
  std::vector<float> v = RandomHalfValues(count, seed, 4.0f);
  const float specials[] = {0.0f, -0.0f, kElementwiseInf, -kElementwiseInf, std::nanf(""), std::ldexp(1.0f, -24),
                            -std::ldexp(1.0f, -24), 65504.0f, -65504.0f};
  for (size_t i = 0; i < count && i < std::size(specials); ++i) v[(i * 7) % count] = specials[i];
  return v;
}

TEST_F(CudaElementwiseTest, ReluForwardAndBackwardMatchTheCpuBitForBit) {
  const Context ctx;
  for (const size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{100003}}) {
    const std::vector<float> x = ReluInputs(count, 11 + static_cast<uint32_t>(count));
    const std::vector<float> dy = RandomHalfValues(count, 5 + static_cast<uint32_t>(count), 2.0f);
    std::vector<float> y_cpu(count), dx_cpu(count);
    kernels::ReluForward<float>(ctx, count, x.data(), y_cpu.data());
    kernels::ReluBackward<float>(ctx, count, y_cpu.data(), dy.data(), dx_cpu.data());
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto dx_h = UploadShifted(ToHalf(x), shift);
      auto dy_h = UploadShifted(ToHalf(dy), shift);
      auto y_h = UploadShifted(std::vector<uint16_t>(count, 0x5555u), shift);
      auto g_h = UploadShifted(std::vector<uint16_t>(count, 0x5555u), shift);
      ASSERT_TRUE(ReluForward(device(), count, dx_h.data() + shift, y_h.data() + shift).ok());
      EXPECT_TRUE(SameBits(DownloadShifted(y_h, shift), PortableHalfBits(y_cpu)));
      ASSERT_TRUE(ReluBackward(device(), count, y_h.data() + shift, dy_h.data() + shift,
                               g_h.data() + shift)
                      .ok());
      EXPECT_TRUE(SameBits(DownloadShifted(g_h, shift), PortableHalfBits(dx_cpu)));
      // In place: dx aliases dy.
      ASSERT_TRUE(ReluBackward(device(), count, y_h.data() + shift, dy_h.data() + shift,
                               dy_h.data() + shift)
                      .ok());
      EXPECT_TRUE(SameBits(DownloadShifted(dy_h, shift), PortableHalfBits(dx_cpu)));
    }
  }
}

// ---- Max-pooling ---------------------------------------------------------------------

TEST_F(CudaElementwiseTest, MaxPoolMatchesTheCpuBitForBit) {
  const Context ctx;
  struct Shape {
    int n, c, h, w, size;
  };
  // Includes size 1, a single window, windows of 3 and 4, and H, W not divisible
  // by the size (the CPU floors; the rows and columns left over get dx = 0).
  const Shape shapes[] = {{1, 1, 2, 2, 2}, {1, 1, 1, 1, 1},  {2, 3, 6, 10, 2}, {3, 5, 9, 9, 3},
                          {1, 2, 7, 5, 2}, {4, 7, 32, 32, 2}, {1, 1, 12, 8, 4}, {2, 1, 3, 3, 1}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("n " + std::to_string(s.n) + " c " + std::to_string(s.c) + " h " +
                 std::to_string(s.h) + " w " + std::to_string(s.w) + " size " +
                 std::to_string(s.size));
    const size_t in_count = static_cast<size_t>(s.n) * s.c * s.h * s.w;
    const size_t out_count =
        static_cast<size_t>(s.n) * s.c * (s.h / s.size) * (s.w / s.size);
    // Few distinct values (and both zeros) so that windows often tie.
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int> pick(-3, 3);
    std::vector<float> x(in_count);
    for (float& v : x) v = static_cast<float>(pick(rng)) * 0.5f;
    for (size_t i = 0; i < in_count; i += 5) x[i] = -0.0f;
    std::vector<float> dy = RandomHalfValues(out_count, seed++, 3.0f);
    for (size_t i = 0; i < out_count; i += 4) dy[i] = -0.0f;  // 0 + -0 = +0 on the CPU

    std::vector<float> y_cpu(out_count), dx_cpu(in_count);
    std::vector<int32_t> arg_cpu(out_count);
    kernels::MaxPoolForward<float>(ctx, s.n, s.c, s.h, s.w, s.size, x.data(), y_cpu.data(),
                                   arg_cpu.data());
    kernels::MaxPoolBackward<float>(ctx, s.n, s.c, s.h, s.w, s.size, dy.data(), arg_cpu.data(),
                                    dx_cpu.data());

    auto dx_h = Upload(ToHalf(x));
    auto y_h = Upload(std::vector<uint16_t>(out_count, 0x5555u));
    auto arg = Upload(std::vector<int32_t>(out_count, -7));
    ASSERT_TRUE(MaxPoolForward(device(), s.n, s.c, s.h, s.w, s.size, dx_h.data(), y_h.data(),
                               arg.data())
                    .ok());
    EXPECT_TRUE(SameBits(Download(y_h), PortableHalfBits(y_cpu)));
    EXPECT_TRUE(SameBits(Download(arg), arg_cpu));

    auto dy_h = Upload(ToHalf(dy));
    auto g_h = Upload(std::vector<uint16_t>(in_count, 0x5555u));  // must be fully written
    ASSERT_TRUE(MaxPoolBackward(device(), s.n, s.c, s.h, s.w, s.size, dy_h.data(), arg.data(),
                                g_h.data())
                    .ok());
    EXPECT_TRUE(SameBits(Download(g_h), PortableHalfBits(dx_cpu)));
  }
}

// ---- Softmax cross-entropy -------------------------------------------------------------

// |got - want| of at most one FP16 unit in the last place (same sign or
// zero), for finite values; NaN where the CPU has NaN.
::testing::AssertionResult WithinOneHalfUlp(const std::vector<uint16_t>& got,
                                            const std::vector<uint16_t>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  size_t bad = 0, inexact = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++inexact;
    bool ok;
    if (IsHalfNan(want[i]) || IsHalfNan(got[i])) {
      ok = IsHalfNan(want[i]) && IsHalfNan(got[i]);
    } else {
      // Map the sign-magnitude bits to a monotonic integer line: adjacent
      // FP16 values (including across +-0) are one apart.
      auto line = [](uint16_t h) {
        return (h & 0x8000u) ? -static_cast<int>(h & 0x7fffu) : static_cast<int>(h);
      };
      ok = std::abs(line(got[i]) - line(want[i])) <= 1;
    }
    if (!ok) {
      if (bad < 5) {
        first += " [" + std::to_string(i) + "] got " + Hex(got[i]) + " want " + Hex(want[i]) + ";";
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << inexact << " off by one unit";
  return ::testing::AssertionFailure() << bad << " of " << got.size()
                                       << " differ by more than one FP16 unit:" << first;
}

TEST_F(CudaElementwiseTest, SoftmaxCrossEntropyMatchesTheCpu) {
  const Context ctx;
  struct Shape {
    int n, classes;
  };
  // One class, one row, the CIFAR head, an eval-sized batch (many rows per
  // group of lanes), wide rows (several logits per lane) and odd sizes.
  const Shape shapes[] = {{1, 1},   {1, 10}, {7, 10},   {256, 10}, {3001, 10},
                          {5, 1000}, {33, 37}, {2, 100}, {1025, 3}, {40, 1}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("n " + std::to_string(s.n) + " classes " + std::to_string(s.classes));
    const size_t count = static_cast<size_t>(s.n) * s.classes;
    std::vector<float> logits = RandomHalfValues(count, seed++, 8.0f);
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int> label_dist(0, s.classes - 1);
    std::vector<int32_t> labels(s.n);
    for (int32_t& l : labels) l = label_dist(rng);
    // Every third row ties its maximum at two places; labelling the second
    // one must not count as correct (first maximum wins), the first must.
    if (s.classes >= 2) {
      for (int i = 0; i < s.n; i += 3) {
        int a = label_dist(rng), b = label_dist(rng);
        if (a == b) b = (a + 1) % s.classes;
        if (a > b) std::swap(a, b);
        logits[static_cast<size_t>(i) * s.classes + a] = 9.0f;
        logits[static_cast<size_t>(i) * s.classes + b] = 9.0f;
        labels[i] = (i / 3) % 2 == 0 ? a : b;
      }
    }
    const float scale = 1024.0f;
    std::vector<float> dlogits_cpu(count);
    int correct_cpu = -1;
    const double mean = kernels::SoftmaxCrossEntropy<float>(
        ctx, s.n, s.classes, logits.data(), labels.data(), scale, dlogits_cpu.data(),
        &correct_cpu);
    kernels::RoundToHalf(dlogits_cpu.data(), count);  // the model stores dlogits in FP16

    auto d_logits = Upload(ToHalf(logits));
    auto d_labels = Upload(labels);
    auto d_scale = Upload(std::vector<float>{scale});
    auto d_dlogits = Upload(std::vector<uint16_t>(count, 0x5555u));
    auto d_loss = Upload(std::vector<float>{-1.0f});
    auto d_correct = Upload(std::vector<int32_t>{-1});
    ASSERT_TRUE(SoftmaxCrossEntropy(device(), s.n, s.classes, d_logits.data(), d_labels.data(),
                                    d_scale.data(), d_dlogits.data(), d_loss.data(),
                                    d_correct.data())
                    .ok());
    // The loss sum: FP32 rounding of the double sum (2^-24 relative) and exp /
    // log differing from glibc's in the last double bits; 1e-6 relative with a
    // small absolute floor for sums near 0 (one class: every loss is 0).
    const double want_sum = mean * s.n;
    const double loss_sum = Download(d_loss)[0];
    EXPECT_NEAR(loss_sum, want_sum, 1e-6 * std::fabs(want_sum) + 1e-6);
    EXPECT_EQ(Download(d_correct)[0], correct_cpu);
    // dlogits: the same double formula rounded to FP32 then FP16; a last-bit
    // difference in exp can flip a rounding, so one FP16 unit is allowed.
    EXPECT_TRUE(WithinOneHalfUlp(Download(d_dlogits), PortableHalfBits(dlogits_cpu)));

    // Without dlogits: the same loss and count.
    auto d_loss2 = Upload(std::vector<float>{-1.0f});
    auto d_correct2 = Upload(std::vector<int32_t>{-1});
    ASSERT_TRUE(SoftmaxCrossEntropy(device(), s.n, s.classes, d_logits.data(), d_labels.data(),
                                    d_scale.data(), nullptr, d_loss2.data(), d_correct2.data())
                    .ok());
    EXPECT_EQ(Bits(Download(d_loss2)[0]), Bits(static_cast<float>(loss_sum)));  // deterministic
    EXPECT_EQ(Download(d_correct2)[0], correct_cpu);
  }
}

TEST_F(CudaElementwiseTest, SoftmaxCrossEntropyFollowsTheCpuOnNanAndInfLogits) {
  const Context ctx;
  const int n = 4, classes = 5;
  const float nan = std::nanf("");
  const std::vector<float> logits = {
      1.0f, nan,  3.0f,  2.0f, 0.0f,   // NaN skipped by the argmax (2); loss NaN
      nan,  4.0f, 1.0f,  0.0f, 2.0f,   // NaN first: argmax stays 0
      1.0f, 2.0f, kElementwiseInf,  0.0f, kElementwiseInf,   // Inf twice: first one (2); Inf - Inf = NaN
      -1.0f, 0.5f, 0.25f, 0.5f, -2.0f  // ordinary tie: first (1)
  };
  const std::vector<int32_t> labels = {2, 0, 2, 1};
  int correct_cpu = -1;
  std::vector<float> dlogits_cpu(n * classes);
  kernels::SoftmaxCrossEntropy<float>(ctx, n, classes, logits.data(), labels.data(), 1.0f,
                                      dlogits_cpu.data(), &correct_cpu);
  kernels::RoundToHalf(dlogits_cpu.data(), dlogits_cpu.size());
  ASSERT_EQ(correct_cpu, 4);

  auto d_logits = Upload(ToHalf(logits));
  auto d_labels = Upload(labels);
  auto d_scale = Upload(std::vector<float>{1.0f});
  auto d_dlogits = Upload(std::vector<uint16_t>(n * classes, 0x5555u));
  auto d_loss = Zeros<float>(1);
  auto d_correct = Zeros<int32_t>(1);
  ASSERT_TRUE(SoftmaxCrossEntropy(device(), n, classes, d_logits.data(), d_labels.data(),
                                  d_scale.data(), d_dlogits.data(), d_loss.data(),
                                  d_correct.data())
                  .ok());
  EXPECT_TRUE(std::isnan(Download(d_loss)[0]));
  EXPECT_EQ(Download(d_correct)[0], correct_cpu);
  EXPECT_TRUE(WithinOneHalfUlp(Download(d_dlogits), PortableHalfBits(dlogits_cpu)));
}

TEST_F(CudaElementwiseTest, SoftmaxCrossEntropyOfNoRowsIsZero) {
  auto d_loss = Upload(std::vector<float>{-1.0f});
  auto d_correct = Upload(std::vector<int32_t>{-1});
  auto d_scale = Upload(std::vector<float>{1.0f});
  ASSERT_TRUE(SoftmaxCrossEntropy(device(), 0, 10, nullptr, nullptr, d_scale.data(), nullptr,
                                  d_loss.data(), d_correct.data())
                  .ok());
  EXPECT_EQ(Download(d_loss)[0], 0.0f);
  EXPECT_EQ(Download(d_correct)[0], 0);
}

// ---- Mixed precision ---------------------------------------------------------------------

TEST_F(CudaElementwiseTest, UnscaleGradientsMatchesTheCpuAndFlagsNonFinite) {
  const Context ctx;
  const float inv_scale = 1.0f / 1024.0f;
  for (const size_t count : {size_t{1}, size_t{5}, size_t{4099}, size_t{100001}}) {
    const std::vector<float> g = RandomHalfValues(count, 3 + static_cast<uint32_t>(count), 60000.0f);
    std::vector<float> want = g;
    kernels::Scale<float>(ctx, count, inv_scale, want.data());  // the CPU's unscale
    auto d_inv = Upload(std::vector<float>{inv_scale});
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto d_g16 = UploadShifted(ToHalf(g), shift);
      auto d_g32 = UploadShifted(std::vector<float>(count, -3.0f), shift);
      auto flag = Zeros<int32_t>(1);
      ASSERT_TRUE(UnscaleGradients(device(), count, d_g16.data() + shift, d_inv.data(),
                                   d_g32.data() + shift, flag.data())
                      .ok());
      EXPECT_TRUE(SameBits(FloatBits(DownloadShifted(d_g32, shift)), FloatBits(want)));
      EXPECT_EQ(Download(flag)[0], 0);

      // One Inf (in the tail when count % 4 != 0), then one NaN at the front.
      std::vector<uint16_t> bad = ToHalf(g);
      bad[count - 1] = 0xfc00u;
      auto d_bad = UploadShifted(bad, shift);
      ASSERT_TRUE(UnscaleGradients(device(), count, d_bad.data() + shift, d_inv.data(),
                                   d_g32.data() + shift, flag.data())
                      .ok());
      EXPECT_EQ(Download(flag)[0], 1);
      EXPECT_EQ(DownloadShifted(d_g32, shift)[count - 1], -kElementwiseInf);
      bad[count - 1] = ToHalf(g)[count - 1];
      bad[0] = 0x7e00u;
      auto d_bad2 = UploadShifted(bad, shift);
      auto flag2 = Zeros<int32_t>(1);
      ASSERT_TRUE(UnscaleGradients(device(), count, d_bad2.data() + shift, d_inv.data(),
                                   d_g32.data() + shift, flag2.data())
                      .ok());
      EXPECT_EQ(Download(flag2)[0], 1);
      // Never cleared: finite input leaves a set flag set.
      ASSERT_TRUE(UnscaleGradients(device(), count, d_g16.data() + shift, d_inv.data(),
                                   d_g32.data() + shift, flag.data())
                      .ok());
      EXPECT_EQ(Download(flag)[0], 1);
    }
  }
}

TEST_F(CudaElementwiseTest, CheckFiniteFlagsInfAndNanOnly) {
  for (const size_t count : {size_t{1}, size_t{6}, size_t{4097}, size_t{65539}}) {
    std::vector<float> x = RandomHalfValues(count, 9 + static_cast<uint32_t>(count), 1e4f);
    x[0] = std::numeric_limits<float>::max();
    x[count / 2] = std::numeric_limits<float>::denorm_min();
    for (const size_t shift : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " shift " + std::to_string(shift));
      auto d_x = UploadShifted(x, shift);
      auto flag = Zeros<int32_t>(1);
      ASSERT_TRUE(CheckFinite(device(), count, d_x.data() + shift, flag.data()).ok());
      EXPECT_EQ(Download(flag)[0], 0);
      for (const float special : {kElementwiseInf, -kElementwiseInf, std::nanf("")}) {
        std::vector<float> bad = x;
        bad[count - 1] = special;
        auto d_bad = UploadShifted(bad, shift);
        auto f = Zeros<int32_t>(1);
        ASSERT_TRUE(CheckFinite(device(), count, d_bad.data() + shift, f.data()).ok());
        EXPECT_EQ(Download(f)[0], 1) << special;
      }
      // Never cleared.
      auto set = Upload(std::vector<int32_t>{1});
      ASSERT_TRUE(CheckFinite(device(), count, d_x.data() + shift, set.data()).ok());
      EXPECT_EQ(Download(set)[0], 1);
    }
  }
}

}  // namespace
}  // namespace chorus::kernels::cuda
