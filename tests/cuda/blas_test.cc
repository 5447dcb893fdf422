// cuBLAS / cuBLASLt GEMM and the fully connected layer (kernels/cuda/blas.cc,
// linear.cu) against the CPU reference (kernels::Gemm / LinearForward /
// LinearBackward in double) on the same FP16-rounded inputs.
//
// Shapes: all four transposes; m, n, k of 1, odd, and just past multiples of
// the tile sizes; leading dimensions larger than the rows (padding that must
// stay untouched); the model's fully connected shapes; pointers that are only
// 2-byte aligned (inside a larger allocation), which cuBLASLt must be told of.
//
// Tolerances. The GPU multiplies FP16 values exactly, sums in FP32 in its own
// order, and rounds each output once:
//   FP16 output: |err| <= 2^-10 |want|   (the final rounding is half an ulp,
//                                          <= 2^-11 |want|; twice that leaves
//                                          room for one more rounding)
//                        + 1e-3 sqrt(K) max|a| max|b|   (a partial sum of K
//                                          terms is ~ sqrt(K) max|a| max|b| for
//                                          random signs; 1e-3 ~ 2^-10 of it
//                                          covers an FP16-rounded partial)
//   FP32 output: |err| <= 1e-5 |want| + 2^-20 K max|a| max|b|  (FP32 sums:
//                                          tree-order rounding ~ log K * 2^-24
//                                          of the sum of |terms|, with margin
//                                          for the tensor cores' accumulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

// cuda_test_util.h first: its helpers call kernels::RoundToHalf & co. unqualified,
// which kernels/cuda/ops.h (same names, device overloads) would hide.
#include "tests/cuda/cuda_test_util.h"
// (separate block: keep after the helper header)
#include "kernels/cuda/ops.h"
#include "kernels/ops.h"

namespace chorus::kernels::cuda {
namespace {

using testing::AllClose;
using testing::RandomHalfValues;
using testing::ToFloat;
using testing::ToHalf;


using testing::kHalfRel;
using testing::MaxAbs;
using testing::ToDouble;
using testing::ToFloatVec;

double HalfAbsTol(int terms, double max_a, double max_b) {
  return 1e-3 * std::sqrt(static_cast<double>(std::max(terms, 1))) * max_a * max_b;
}

class BlasTest : public testing::GpuTest {
 public:
  // The free check functions below drive the fixture.
  using GpuTest::device;
  using GpuTest::Download;
  using GpuTest::Upload;

  // Uploads v as FP16 starting `offset` halves into a fresh allocation (offset 1:
  // a 2-byte aligned pointer). Returns the array; the data starts at data() + offset.
  DeviceArray<Half> UploadHalf(const std::vector<float>& v, size_t offset = 0) {
    std::vector<Half> h(offset, 0);
    const std::vector<Half> body = ToHalf(v);
    h.insert(h.end(), body.begin(), body.end());
    return Upload(h);
  }
  std::vector<float> DownloadHalf(const DeviceArray<Half>& a, size_t offset = 0) {
    std::vector<Half> h = Download(a);
    return ToFloat(std::vector<Half>(h.begin() + static_cast<std::ptrdiff_t>(offset), h.end()));
  }
};

// ---- Gemm ---------------------------------------------------------------------------

struct GemmCase {
  int m, n, k;
};

const GemmCase kGemmCases[] = {{1, 1, 1}, {7, 13, 33}, {65, 3, 129}, {2, 130, 5}, {17, 1, 64}};
constexpr int kPad = 3;  // extra columns in every leading dimension

// Runs one row-major GEMM on the GPU (FP16 or FP32 C) and on the CPU in double,
// and compares the m x n results and the untouched padding.
template <typename C>
void CheckGemm(BlasTest* t, bool trans_a, bool trans_b, const GemmCase& g, float alpha, float beta,
               uint32_t seed) {
  SCOPED_TRACE("trans_a=" + std::to_string(trans_a) + " trans_b=" + std::to_string(trans_b) +
               " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
               " k=" + std::to_string(g.k) + " beta=" + std::to_string(beta));
  const int a_rows = trans_a ? g.k : g.m, lda = (trans_a ? g.m : g.k) + kPad;
  const int b_rows = trans_b ? g.n : g.k, ldb = (trans_b ? g.k : g.n) + kPad;
  const int ldc = g.n + kPad;
  const std::vector<float> a = RandomHalfValues(static_cast<size_t>(a_rows) * lda, seed, 1.0f);
  const std::vector<float> b = RandomHalfValues(static_cast<size_t>(b_rows) * ldb, seed + 1, 0.5f);
  const std::vector<float> c0 = RandomHalfValues(static_cast<size_t>(g.m) * ldc, seed + 2, 2.0f);

  std::vector<double> want = ToDouble(c0);
  const std::vector<double> a64 = ToDouble(a), b64 = ToDouble(b);
  kernels::Gemm<double>(kernels::Context{}, trans_a, trans_b, g.m, g.n, g.k, alpha, a64.data(),
                        lda, b64.data(), ldb, beta, want.data(), ldc);

  DeviceArray<Half> da = t->UploadHalf(a);
  DeviceArray<Half> db = t->UploadHalf(b);
  std::vector<float> got;
  if constexpr (std::is_same_v<C, Half>) {
    DeviceArray<Half> dc = t->UploadHalf(c0);
    const Status s = Gemm(t->device(), trans_a, trans_b, g.m, g.n, g.k, alpha, da.data(), lda,
                          db.data(), ldb, beta, dc.data(), ldc);
    ASSERT_TRUE(s.ok()) << s.ToString();
    got = t->DownloadHalf(dc);
  } else {
    DeviceArray<float> dc = t->Upload(c0);
    const Status s = Gemm(t->device(), trans_a, trans_b, g.m, g.n, g.k, alpha, da.data(), lda,
                          db.data(), ldb, beta, dc.data(), ldc);
    ASSERT_TRUE(s.ok()) << s.ToString();
    got = t->Download(dc);
  }

  // Split into the m x n result and the padding columns (must equal c0 exactly).
  std::vector<float> got_c, want_c, got_pad, c0_pad;
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const size_t idx = static_cast<size_t>(i) * ldc + j;
      if (j < g.n) {
        got_c.push_back(got[idx]);
        want_c.push_back(static_cast<float>(want[idx]));
      } else {
        got_pad.push_back(got[idx]);
        c0_pad.push_back(c0[idx]);
      }
    }
  }
  const double max_a = MaxAbs(a), max_b = MaxAbs(b);
  if constexpr (std::is_same_v<C, Half>) {
    EXPECT_TRUE(AllClose(got_c, want_c, std::fabs(alpha) * HalfAbsTol(g.k, max_a, max_b),
                         kHalfRel));
  } else {
    EXPECT_TRUE(AllClose(got_c, want_c, std::fabs(alpha) * g.k * max_a * max_b / (1 << 20), 1e-5));
  }
  EXPECT_EQ(got_pad, c0_pad) << "padding beyond n columns was written";
}

TEST_F(BlasTest, GemmHalfOutputAllTransposes) {
  uint32_t seed = 100;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const GemmCase& g : kGemmCases) {
        CheckGemm<Half>(this, ta, tb, g, 1.0f, 0.0f, seed += 3);
        CheckGemm<Half>(this, ta, tb, g, 0.75f, 0.5f, seed += 3);
      }
    }
  }
}

TEST_F(BlasTest, GemmFloatOutputAllTransposes) {
  uint32_t seed = 200;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const GemmCase& g : kGemmCases) {
        CheckGemm<float>(this, ta, tb, g, 1.0f, 0.0f, seed += 3);
        CheckGemm<float>(this, ta, tb, g, -0.5f, 1.0f, seed += 3);
      }
    }
  }
}

// K = 0: C = beta * C (beta = 0 writes zeros), as kernels::Gemm.
TEST_F(BlasTest, GemmEmptyInnerDimensionScalesC) {
  for (float beta : {0.0f, 0.5f}) {
    CheckGemm<Half>(this, false, false, GemmCase{5, 7, 0}, 1.0f, beta, 300);
    CheckGemm<float>(this, true, true, GemmCase{5, 7, 0}, 1.0f, beta, 310);
  }
}

// ---- Linear -------------------------------------------------------------------------

struct LinearCase {
  int n, in, out;
};

// n = 1; odd sizes; the MLP's fc1 (784 -> 256) and the CNN's fc1 (3136 -> 256)
// and fc2 (256 -> 10).
const LinearCase kLinearCases[] = {{1, 1, 1},    {5, 7, 3},     {3, 33, 17},
                                   {16, 784, 256}, {5, 3136, 256}, {33, 256, 10}};

struct LinearData {
  std::vector<float> x, w, b, dy;
};

LinearData MakeLinearData(const LinearCase& c, uint32_t seed) {
  LinearData d;
  d.x = RandomHalfValues(static_cast<size_t>(c.n) * c.in, seed, 1.0f);
  // Weights of the model's scale (PyTorch init: uniform +-1/sqrt(in)).
  d.w = RandomHalfValues(static_cast<size_t>(c.out) * c.in, seed + 1,
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.in))));
  d.b = RandomHalfValues(static_cast<size_t>(c.out), seed + 2, 0.5f);
  d.dy = RandomHalfValues(static_cast<size_t>(c.n) * c.out, seed + 3, 0.25f);
  return d;
}

void CheckLinearForward(BlasTest* t, const LinearCase& c, bool with_bias, size_t offset,
                        uint32_t seed) {
  SCOPED_TRACE("n=" + std::to_string(c.n) + " in=" + std::to_string(c.in) +
               " out=" + std::to_string(c.out) + " bias=" + std::to_string(with_bias) +
               " offset=" + std::to_string(offset));
  const LinearData d = MakeLinearData(c, seed);
  const std::vector<double> x = ToDouble(d.x), w = ToDouble(d.w), b = ToDouble(d.b);
  std::vector<double> want(static_cast<size_t>(c.n) * c.out);
  kernels::LinearForward<double>(kernels::Context{}, c.n, c.in, c.out, x.data(), w.data(),
                                 with_bias ? b.data() : nullptr, want.data());

  DeviceArray<Half> dx = t->UploadHalf(d.x, offset);
  DeviceArray<Half> dw = t->UploadHalf(d.w, offset);
  DeviceArray<Half> dbias = t->UploadHalf(d.b, offset);
  // y starts as NaN bits: every element must be written.
  DeviceArray<Half> dy_out = t->Upload(std::vector<Half>(offset + want.size(), 0x7e00));
  const Status s = LinearForward(t->device(), c.n, c.in, c.out, dx.data() + offset,
                                 dw.data() + offset, with_bias ? dbias.data() + offset : nullptr,
                                 dy_out.data() + offset);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(AllClose(t->DownloadHalf(dy_out, offset), ToFloatVec(want),
                       HalfAbsTol(c.in, MaxAbs(d.x), MaxAbs(d.w)), kHalfRel));
}

TEST_F(BlasTest, LinearForwardMatchesCpu) {
  uint32_t seed = 400;
  for (const LinearCase& c : kLinearCases) {
    CheckLinearForward(this, c, /*with_bias=*/true, /*offset=*/0, seed += 5);
    CheckLinearForward(this, c, /*with_bias=*/false, /*offset=*/0, seed += 5);
  }
}

// Tensors inside a parameter arena need not be 256-byte aligned: the cached
// cuBLASLt algorithm must be chosen for the actual (here 2-byte) alignment.
TEST_F(BlasTest, LinearForwardMisalignedPointers) {
  uint32_t seed = 500;
  for (const LinearCase& c : kLinearCases) {
    CheckLinearForward(this, c, true, /*offset=*/1, seed += 5);
    // The same shape again at full alignment after the misaligned one (the
    // cache is keyed by alignment).
    CheckLinearForward(this, c, true, /*offset=*/0, seed += 5);
  }
}

void CheckLinearBackward(BlasTest* t, const LinearCase& c, bool with_dx, uint32_t seed) {
  SCOPED_TRACE("n=" + std::to_string(c.n) + " in=" + std::to_string(c.in) +
               " out=" + std::to_string(c.out) + " dx=" + std::to_string(with_dx));
  const LinearData d = MakeLinearData(c, seed);
  const std::vector<double> x = ToDouble(d.x), w = ToDouble(d.w), dy = ToDouble(d.dy);
  std::vector<double> want_dx(static_cast<size_t>(c.n) * c.in);
  std::vector<double> want_dw(static_cast<size_t>(c.out) * c.in);
  std::vector<double> want_db(static_cast<size_t>(c.out));
  kernels::LinearBackward<double>(kernels::Context{}, c.n, c.in, c.out, x.data(), w.data(),
                                  dy.data(), want_dx.data(), want_dw.data(), want_db.data());

  DeviceArray<Half> gx = t->UploadHalf(d.x), gw = t->UploadHalf(d.w), gdy = t->UploadHalf(d.dy);
  constexpr Half kNanBits = 0x7e00;  // outputs start as NaN: each must be written
  DeviceArray<Half> gdx = t->Upload(std::vector<Half>(want_dx.size(), kNanBits));
  DeviceArray<Half> gdw = t->Upload(std::vector<Half>(want_dw.size(), kNanBits));
  DeviceArray<Half> gdb = t->Upload(std::vector<Half>(want_db.size(), kNanBits));
  const Status s = LinearBackward(t->device(), c.n, c.in, c.out, gx.data(), gw.data(), gdy.data(),
                                  with_dx ? gdx.data() : nullptr, gdw.data(), gdb.data());
  ASSERT_TRUE(s.ok()) << s.ToString();

  const double max_x = MaxAbs(d.x), max_w = MaxAbs(d.w), max_dy = MaxAbs(d.dy);
  // dw: sums over the batch (K = n); db: the same sums with x = 1; dx: K = out.
  EXPECT_TRUE(AllClose(t->DownloadHalf(gdw), ToFloatVec(want_dw), HalfAbsTol(c.n, max_dy, max_x),
                       kHalfRel));
  EXPECT_TRUE(AllClose(t->DownloadHalf(gdb), ToFloatVec(want_db), HalfAbsTol(c.n, max_dy, 1.0),
                       kHalfRel));
  const std::vector<float> got_dx = t->DownloadHalf(gdx);
  if (with_dx) {
    EXPECT_TRUE(AllClose(got_dx, ToFloatVec(want_dx), HalfAbsTol(c.out, max_dy, max_w), kHalfRel));
  } else {
    for (float v : got_dx) ASSERT_TRUE(std::isnan(v)) << "dx written although nullptr was passed";
  }
}

TEST_F(BlasTest, LinearBackwardMatchesCpu) {
  uint32_t seed = 600;
  for (const LinearCase& c : kLinearCases) {
    CheckLinearBackward(this, c, /*with_dx=*/true, seed += 5);
    CheckLinearBackward(this, c, /*with_dx=*/false, seed += 5);
  }
}

// A batch far larger than the column-sum kernel's 16 row lanes and 32-column
// tiles, with columns not a multiple of 32.
TEST_F(BlasTest, LinearBackwardLargeBatchBias) {
  CheckLinearBackward(this, LinearCase{1000, 9, 45}, true, 700);
}

}  // namespace
}  // namespace chorus::kernels::cuda
