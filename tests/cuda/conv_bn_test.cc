// The convolution plan (cuDNN, kernels/cuda/cudnn_ops.cc, with its own bias
// gradient) and the BatchNorm plan (own kernels, kernels/cuda/channels.cu) against the
// CPU reference (kernels::Conv2d* / BatchNorm* in double) on the same
// FP16-rounded inputs.
//
// Convolution shapes: the CNN's conv1 (1 -> 32, 5x5, pad 2, 28x28) and conv2
// (32 -> 64, 5x5, pad 2, 14x14); stride 2 with and without rows that no window
// reaches (H + 2 pad - R not a multiple of the stride: dx must be 0 there);
// non-square filters; a 1x1 image; batch 1 and odd batches.
// BatchNorm shapes: odd channel counts and HW = 1 (BatchNorm1d-like), the
// CNN's bn1 / bn2, m = N * HW = 2, the smallest valid batch, and batches large
// enough that each block of a channel sums several images (even and odd HW).
//
// Tolerances. FP16 outputs are rounded once after an FP32 computation in an
// order (and, for convolutions, possibly an algorithm: Winograd, FFT) that
// differs from the CPU's:
//   conv: |err| <= 2^-10 |want| (the rounding of the output, with a factor 2 of
//         room) + 2e-3 sqrt(T) max|a| max|b|, T the terms of each sum (C R S
//         forward, K R S for dx, N P Q for dw and db). 2e-3 rather than 1e-3:
//         Winograd / FFT transforms mix terms, so their rounding errors scale
//         with the transformed magnitudes, not the output's.
//   BatchNorm: FP32 statistics (relative error ~ 1e-6; 1e-4 allows tree or
//         shifted reductions over m <= 12544 values); outputs in FP16 as above,
//         with 1e-3 of the output scale absolute for the statistics' error
//         carried through the normalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
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

constexpr Half kNanBits = 0x7e00;          // outputs start as NaN: each must be written

using testing::kHalfRel;
using testing::MaxAbs;
using testing::ToDouble;
using testing::ToFloatVec;

double ConvAbsTol(size_t terms, double max_a, double max_b) {
  return 2e-3 * std::sqrt(static_cast<double>(std::max<size_t>(terms, 1))) * max_a * max_b;
}

class ConvBnTest : public testing::GpuTest {
 public:
  using GpuTest::device;
  using GpuTest::Download;
  using GpuTest::Upload;

  DeviceArray<Half> UploadHalf(const std::vector<float>& v) { return Upload(ToHalf(v)); }
  DeviceArray<Half> NanHalf(size_t count) { return Upload(std::vector<Half>(count, kNanBits)); }
  std::vector<float> DownloadHalf(const DeviceArray<Half>& a) { return ToFloat(Download(a)); }
};

// ---- Convolution ------------------------------------------------------------------

Conv2dShape Shape(int n, int c, int h, int w, int k, int r, int s, int pad, int stride) {
  Conv2dShape shape;
  shape.n = n;
  shape.c = c;
  shape.h = h;
  shape.w = w;
  shape.k = k;
  shape.r = r;
  shape.s = s;
  shape.pad = pad;
  shape.stride = stride;
  return shape;
}

std::string Describe(const Conv2dShape& s) {
  return "N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) + " H=" + std::to_string(s.h) +
         " W=" + std::to_string(s.w) + " K=" + std::to_string(s.k) + " R=" + std::to_string(s.r) +
         " S=" + std::to_string(s.s) + " pad=" + std::to_string(s.pad) +
         " stride=" + std::to_string(s.stride);
}

const Conv2dShape kConvShapes[] = {
    Shape(3, 1, 28, 28, 32, 5, 5, 2, 1),   // CNN conv1
    Shape(2, 32, 14, 14, 64, 5, 5, 2, 1),  // CNN conv2
    Shape(3, 3, 9, 11, 5, 3, 3, 1, 2),     // stride 2, every input row reached
    Shape(2, 4, 10, 8, 3, 3, 3, 1, 2),     // stride 2, last row / column unreached
    Shape(1, 2, 5, 4, 3, 3, 1, 0, 1),      // 3x1 filter, no padding
    Shape(5, 3, 7, 6, 7, 2, 4, 1, 1),      // 2x4 filter, odd everything
    Shape(1, 1, 1, 1, 1, 1, 1, 0, 1),      // a single tap
};

struct ConvData {
  std::vector<float> x, w, b, dy;
};

ConvData MakeConvData(const Conv2dShape& s, uint32_t seed) {
  ConvData d;
  const size_t x_count = static_cast<size_t>(s.n) * s.c * s.h * s.w;
  const size_t w_count = static_cast<size_t>(s.k) * s.c * s.r * s.s;
  const size_t y_count = static_cast<size_t>(s.n) * s.k * s.OutH() * s.OutW();
  d.x = RandomHalfValues(x_count, seed, 1.0f);
  d.w = RandomHalfValues(w_count, seed + 1,
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.c * s.r * s.s))));
  d.b = RandomHalfValues(static_cast<size_t>(s.k), seed + 2, 0.5f);
  d.dy = RandomHalfValues(y_count, seed + 3, 0.25f);
  return d;
}

TEST_F(ConvBnTest, ConvForwardMatchesCpu) {
  uint32_t seed = 1000;
  for (const Conv2dShape& s : kConvShapes) {
    SCOPED_TRACE(Describe(s));
    const ConvData d = MakeConvData(s, seed += 7);
    const std::vector<double> x = ToDouble(d.x), w = ToDouble(d.w), b = ToDouble(d.b);
    std::vector<double> want(d.dy.size());
    std::vector<double> cpu_workspace(s.WorkspaceElems());
    kernels::Conv2dForward<double>(kernels::Context{}, s, x.data(), w.data(), b.data(),
                                   want.data(), cpu_workspace.data());

    auto plan = ConvPlan::Create(device(), s);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    EXPECT_EQ((*plan)->shape().OutH(), s.OutH());
    auto workspace = DeviceArray<uint8_t>::Create(device(), (*plan)->workspace_bytes());
    ASSERT_TRUE(workspace.has_value());
    DeviceArray<Half> gx = UploadHalf(d.x), gw = UploadHalf(d.w), gb = UploadHalf(d.b);
    DeviceArray<Half> gy = NanHalf(want.size());
    const Status st =
        (*plan)->Forward(device(), gx.data(), gw.data(), gb.data(), gy.data(), workspace->data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(AllClose(DownloadHalf(gy), ToFloatVec(want),
                         ConvAbsTol(static_cast<size_t>(s.c) * s.r * s.s, MaxAbs(d.x),
                                    MaxAbs(d.w)),
                         kHalfRel));

    // Without a bias: the pure convolution.
    std::vector<double> want_nb(want.size());
    kernels::Conv2dForward<double>(kernels::Context{}, s, x.data(), w.data(), nullptr,
                                   want_nb.data(), cpu_workspace.data());
    DeviceArray<Half> gy_nb = NanHalf(want.size());
    const Status st_nb =
        (*plan)->Forward(device(), gx.data(), gw.data(), nullptr, gy_nb.data(), workspace->data());
    ASSERT_TRUE(st_nb.ok()) << st_nb.ToString();
    EXPECT_TRUE(AllClose(DownloadHalf(gy_nb), ToFloatVec(want_nb),
                         ConvAbsTol(static_cast<size_t>(s.c) * s.r * s.s, MaxAbs(d.x),
                                    MaxAbs(d.w)),
                         kHalfRel));
  }
}

// The bias joins the FP32 sum before the one rounding of y. x = 1, and per
// filter the centre tap of channel 0 is 1 and tap (0, 0) is 2^-12 (zero
// elsewhere), b = -1: where both taps see the image, the sum is 1 + 2^-12
// exactly (in any order) and y must be 2^-12; rounding the sum to FP16 first
// (to 1) and then adding the bias gives 0. The CNN's shapes at the training
// batch as well: the algorithm cuDNN picks depends on the batch.
TEST_F(ConvBnTest, ConvForwardRoundsOnceAfterTheBias) {
  std::vector<Conv2dShape> shapes(std::begin(kConvShapes), std::end(kConvShapes));
  shapes.push_back(Shape(32, 1, 28, 28, 32, 5, 5, 2, 1));
  shapes.push_back(Shape(32, 32, 14, 14, 64, 5, 5, 2, 1));
  const double small = std::ldexp(1.0, -12);
  for (const Conv2dShape& s : shapes) {
    if (s.r * s.s < 2) continue;  // no second tap
    SCOPED_TRACE(Describe(s));
    const size_t taps = static_cast<size_t>(s.r) * s.s;
    std::vector<float> x(static_cast<size_t>(s.n) * s.c * s.h * s.w, 1.0f);
    std::vector<float> w(static_cast<size_t>(s.k) * s.c * taps, 0.0f);
    for (int k = 0; k < s.k; ++k) {
      float* filter = w.data() + static_cast<size_t>(k) * s.c * taps;  // channel 0
      filter[static_cast<size_t>(s.r / 2) * s.s + s.s / 2] = 1.0f;
      filter[0] = static_cast<float>(small);
    }
    const std::vector<float> b(static_cast<size_t>(s.k), -1.0f);
    const std::vector<double> xd = ToDouble(x), wd = ToDouble(w), bd = ToDouble(b);
    std::vector<double> exact(static_cast<size_t>(s.n) * s.k * s.OutH() * s.OutW());
    std::vector<double> cpu_workspace(s.WorkspaceElems());
    kernels::Conv2dForward<double>(kernels::Context{}, s, xd.data(), wd.data(), bd.data(),
                                   exact.data(), cpu_workspace.data());
    const std::vector<float> want = ToFloat(ToHalf(ToFloatVec(exact)));
    ASSERT_GT(std::count(want.begin(), want.end(), static_cast<float>(small)), 0);

    auto plan = ConvPlan::Create(device(), s);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    auto workspace = DeviceArray<uint8_t>::Create(device(), (*plan)->workspace_bytes());
    ASSERT_TRUE(workspace.has_value());
    DeviceArray<Half> gx = UploadHalf(x), gw = UploadHalf(w), gb = UploadHalf(b);
    DeviceArray<Half> gy = NanHalf(want.size());
    const Status st =
        (*plan)->Forward(device(), gx.data(), gw.data(), gb.data(), gy.data(), workspace->data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    // 2^-20 absolute: an FFT or Winograd algorithm's FP32 error on sums of
    // order 1 (~1e-7), a few FP16 steps at 2^-12 and far below 2^-12 itself.
    EXPECT_TRUE(AllClose(DownloadHalf(gy), want, std::ldexp(1.0, -20), kHalfRel));
  }
}

TEST_F(ConvBnTest, ConvBackwardMatchesCpu) {
  uint32_t seed = 2000;
  for (const Conv2dShape& s : kConvShapes) {
    SCOPED_TRACE(Describe(s));
    const ConvData d = MakeConvData(s, seed += 7);
    const std::vector<double> x = ToDouble(d.x), w = ToDouble(d.w), dy = ToDouble(d.dy);
    std::vector<double> want_dx(d.x.size()), want_dw(d.w.size()), want_db(d.b.size());
    std::vector<double> cpu_workspace(s.WorkspaceElems());
    kernels::Conv2dBackward<double>(kernels::Context{}, s, x.data(), w.data(), dy.data(),
                                    want_dx.data(), want_dw.data(), want_db.data(),
                                    cpu_workspace.data());

    auto plan = ConvPlan::Create(device(), s);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    auto workspace = DeviceArray<uint8_t>::Create(device(), (*plan)->workspace_bytes());
    ASSERT_TRUE(workspace.has_value());
    DeviceArray<Half> gx = UploadHalf(d.x), gw = UploadHalf(d.w), gdy = UploadHalf(d.dy);
    DeviceArray<Half> gdx = NanHalf(want_dx.size()), gdw = NanHalf(want_dw.size()),
                      gdb = NanHalf(want_db.size());
    const Status st = (*plan)->Backward(device(), gx.data(), gw.data(), gdy.data(), gdx.data(),
                                        gdw.data(), gdb.data(), workspace->data());
    ASSERT_TRUE(st.ok()) << st.ToString();

    const size_t npq = static_cast<size_t>(s.n) * s.OutH() * s.OutW();
    const double max_x = MaxAbs(d.x), max_w = MaxAbs(d.w), max_dy = MaxAbs(d.dy);
    EXPECT_TRUE(AllClose(DownloadHalf(gdx), ToFloatVec(want_dx),
                         ConvAbsTol(static_cast<size_t>(s.k) * s.r * s.s, max_dy, max_w),
                         kHalfRel))
        << "dx";
    EXPECT_TRUE(AllClose(DownloadHalf(gdw), ToFloatVec(want_dw), ConvAbsTol(npq, max_dy, max_x),
                         kHalfRel))
        << "dw";
    EXPECT_TRUE(AllClose(DownloadHalf(gdb), ToFloatVec(want_db), ConvAbsTol(npq, max_dy, 1.0),
                         kHalfRel))
        << "db";

    // dx == nullptr (the first layer): dw and db as before, dx untouched.
    DeviceArray<Half> gdx2 = NanHalf(want_dx.size()), gdw2 = NanHalf(want_dw.size()),
                      gdb2 = NanHalf(want_db.size());
    const Status st2 = (*plan)->Backward(device(), gx.data(), gw.data(), gdy.data(), nullptr,
                                         gdw2.data(), gdb2.data(), workspace->data());
    ASSERT_TRUE(st2.ok()) << st2.ToString();
    EXPECT_TRUE(AllClose(DownloadHalf(gdw2), ToFloatVec(want_dw), ConvAbsTol(npq, max_dy, max_x),
                         kHalfRel));
    EXPECT_TRUE(AllClose(DownloadHalf(gdb2), ToFloatVec(want_db), ConvAbsTol(npq, max_dy, 1.0),
                         kHalfRel));
    for (float v : DownloadHalf(gdx2)) ASSERT_TRUE(std::isnan(v)) << "dx written for nullptr";
  }
}

TEST_F(ConvBnTest, ConvPlanRejectsInvalidShape) {
  // A 5x5 filter on a 3x3 image without padding has no output.
  auto plan = ConvPlan::Create(device(), Shape(1, 1, 3, 3, 1, 5, 5, 0, 1));
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code(), StatusCode::kInvalidArgument);
}

// ---- BatchNorm ---------------------------------------------------------------------

BatchNormShape BnShape(int n, int c, int hw) {
  BatchNormShape s;
  s.n = n;
  s.c = c;
  s.hw = hw;
  return s;  // eps 1e-5, momentum 0.1
}

const BatchNormShape kBnShapes[] = {
    BnShape(4, 3, 7),     // odd
    BnShape(5, 7, 1),     // HW = 1
    BnShape(1, 1, 2),     // m = 2
    BnShape(2, 32, 784),  // CNN bn1 (batch 2)
    BnShape(3, 64, 196),  // CNN bn2 (batch 3)
    BnShape(64, 32, 196), // several images per block
    BnShape(33, 5, 9),    // odd HW, several images per block
};

struct BnData {
  std::vector<float> x, gamma, beta, running_mean, running_var, dy;
};

BnData MakeBnData(const BatchNormShape& s, uint32_t seed) {
  BnData d;
  const size_t count = static_cast<size_t>(s.n) * s.c * s.hw;
  d.x = RandomHalfValues(count, seed, 1.0f);
  // A per-channel offset, so that the mean matters (and is not ~0).
  for (size_t i = 0; i < count; ++i) {
    const int c = static_cast<int>((i / static_cast<size_t>(s.hw)) % static_cast<size_t>(s.c));
    d.x[i] += 0.5f * static_cast<float>(c % 3);
  }
  kernels::RoundToHalf(d.x.data(), d.x.size());
  d.gamma = RandomHalfValues(static_cast<size_t>(s.c), seed + 1, 0.5f);
  for (float& g : d.gamma) g += 1.0f;  // [0.5, 1.5]
  d.beta = RandomHalfValues(static_cast<size_t>(s.c), seed + 2, 0.5f);
  d.running_mean = RandomHalfValues(static_cast<size_t>(s.c), seed + 3, 0.1f);
  d.running_var = RandomHalfValues(static_cast<size_t>(s.c), seed + 4, 0.5f);
  for (float& v : d.running_var) v += 1.0f;  // [0.5, 1.5]
  d.dy = RandomHalfValues(count, seed + 5, 0.25f);
  return d;
}

std::string Describe(const BatchNormShape& s) {
  return "N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) + " HW=" + std::to_string(s.hw);
}

TEST_F(ConvBnTest, BatchNormTrainAndBackwardMatchCpu) {
  uint32_t seed = 3000;
  for (const BatchNormShape& s : kBnShapes) {
    SCOPED_TRACE(Describe(s));
    const BnData d = MakeBnData(s, seed += 11);
    const size_t channels = static_cast<size_t>(s.c);
    const size_t m = static_cast<size_t>(s.n) * s.hw;

    // CPU, double.
    const std::vector<double> x = ToDouble(d.x), gamma = ToDouble(d.gamma),
                              beta = ToDouble(d.beta), dy = ToDouble(d.dy);
    std::vector<double> y(x.size()), mean(channels), inv_std(channels);
    std::vector<double> run_mean = ToDouble(d.running_mean), run_var = ToDouble(d.running_var);
    kernels::BatchNormForwardTrain<double>(kernels::Context{}, s, x.data(), gamma.data(),
                                           beta.data(), y.data(), mean.data(), inv_std.data(),
                                           run_mean.data(), run_var.data());
    std::vector<double> dx(x.size()), dgamma(channels), dbeta(channels);
    kernels::BatchNormBackward<double>(kernels::Context{}, s, x.data(), gamma.data(), mean.data(),
                                       inv_std.data(), dy.data(), dx.data(), dgamma.data(),
                                       dbeta.data());

    // GPU.
    auto plan = BatchNormPlan::Create(device(), s);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    DeviceArray<Half> gx = UploadHalf(d.x), gdy = UploadHalf(d.dy);
    DeviceArray<Half> gy = NanHalf(x.size()), gdx = NanHalf(x.size());
    DeviceArray<float> ggamma = Upload(d.gamma), gbeta = Upload(d.beta);
    DeviceArray<float> gmean = Upload(std::vector<float>(channels, NAN));
    DeviceArray<float> ginv_std = Upload(std::vector<float>(channels, NAN));
    DeviceArray<float> grun_mean = Upload(d.running_mean), grun_var = Upload(d.running_var);
    DeviceArray<float> gdgamma = Upload(std::vector<float>(channels, NAN));
    DeviceArray<float> gdbeta = Upload(std::vector<float>(channels, NAN));
    Status st = (*plan)->ForwardTrain(device(), gx.data(), ggamma.data(), gbeta.data(), gy.data(),
                                      gmean.data(), ginv_std.data(), grun_mean.data(),
                                      grun_var.data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = (*plan)->Backward(device(), gx.data(), ggamma.data(), gmean.data(), ginv_std.data(),
                           gdy.data(), gdx.data(), gdgamma.data(), gdbeta.data());
    ASSERT_TRUE(st.ok()) << st.ToString();

    const double max_x = MaxAbs(d.x), max_gamma = MaxAbs(d.gamma), max_dy = MaxAbs(d.dy);
    double max_inv_std = 0.0, max_xhat = 0.0;
    for (size_t c = 0; c < channels; ++c) max_inv_std = std::max(max_inv_std, inv_std[c]);
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = (i / static_cast<size_t>(s.hw)) % channels;
      max_xhat = std::max(max_xhat, std::fabs((x[i] - mean[c]) * inv_std[c]));
    }
    // y = gamma xhat + beta: FP16 rounding plus the statistics' error times gamma.
    EXPECT_TRUE(AllClose(DownloadHalf(gy), ToFloatVec(y), 1e-3 * max_gamma, kHalfRel)) << "y";
    EXPECT_TRUE(AllClose(Download(gmean), ToFloatVec(mean), 1e-4 * max_x, 1e-4)) << "save_mean";
    EXPECT_TRUE(AllClose(Download(ginv_std), ToFloatVec(inv_std), 0.0, 1e-4)) << "save_inv_std";
    // Running statistics: the CPU's unbiased variance m / (m - 1) (cuDNN's too).
    EXPECT_TRUE(AllClose(Download(grun_mean), ToFloatVec(run_mean), 1e-4 * max_x, 1e-4))
        << "running_mean";
    EXPECT_TRUE(AllClose(Download(grun_var), ToFloatVec(run_var), 1e-6, 1e-4)) << "running_var";
    // dx ~ gamma inv_std (dy - ...): FP16 rounding, plus the statistics' error.
    EXPECT_TRUE(
        AllClose(DownloadHalf(gdx), ToFloatVec(dx), 1e-3 * max_gamma * max_inv_std * max_dy,
                 kHalfRel))
        << "dx";
    // dgamma, dbeta: FP32 sums of m terms (tree order: ~log2(m) 2^-24 of the
    // sum of |terms|; m * 2^-20 of the largest term bounds that with room).
    const double sum_tol = static_cast<double>(m) / (1 << 20) * max_dy;
    EXPECT_TRUE(AllClose(Download(gdgamma), ToFloatVec(dgamma), sum_tol * max_xhat, 1e-4))
        << "dgamma";
    EXPECT_TRUE(AllClose(Download(gdbeta), ToFloatVec(dbeta), sum_tol, 1e-4)) << "dbeta";
  }
}

TEST_F(ConvBnTest, BatchNormEvalMatchesCpu) {
  uint32_t seed = 4000;
  for (const BatchNormShape& s : kBnShapes) {
    SCOPED_TRACE(Describe(s));
    const BnData d = MakeBnData(s, seed += 11);
    const std::vector<double> x = ToDouble(d.x), gamma = ToDouble(d.gamma),
                              beta = ToDouble(d.beta), run_mean = ToDouble(d.running_mean),
                              run_var = ToDouble(d.running_var);
    std::vector<double> y(x.size());
    kernels::BatchNormForwardEval<double>(kernels::Context{}, s, x.data(), gamma.data(),
                                          beta.data(), run_mean.data(), run_var.data(), y.data());

    auto plan = BatchNormPlan::Create(device(), s);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    DeviceArray<Half> gx = UploadHalf(d.x), gy = NanHalf(x.size());
    DeviceArray<float> ggamma = Upload(d.gamma), gbeta = Upload(d.beta);
    DeviceArray<float> grun_mean = Upload(d.running_mean), grun_var = Upload(d.running_var);
    const Status st = (*plan)->ForwardEval(device(), gx.data(), ggamma.data(), gbeta.data(),
                                           grun_mean.data(), grun_var.data(), gy.data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(AllClose(DownloadHalf(gy), ToFloatVec(y), 1e-3 * MaxAbs(d.gamma), kHalfRel));
    // The running statistics are inputs here: unchanged.
    EXPECT_EQ(Download(grun_mean), d.running_mean);
    EXPECT_EQ(Download(grun_var), d.running_var);
  }
}

TEST_F(ConvBnTest, BatchNormPlanRejectsBadArguments) {
  BatchNormShape bad_eps = BnShape(2, 3, 4);
  bad_eps.eps = 0.0;
  auto p1 = BatchNormPlan::Create(device(), bad_eps);
  ASSERT_FALSE(p1.has_value());
  EXPECT_EQ(p1.error().code(), StatusCode::kInvalidArgument);
  auto p2 = BatchNormPlan::Create(device(), BnShape(0, 3, 4));
  ASSERT_FALSE(p2.has_value());
  EXPECT_EQ(p2.error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chorus::kernels::cuda
