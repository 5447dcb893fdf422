// MaxPool forward/backward on hand-made inputs (first maximum wins ties, argmax
// is the flat input index, backward routes dy there and zeroes the rest), and
// ReLU (NaN passes forward, backward works in place). Gradients are checked
// by finite differences in gradient_check_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

TEST(MaxPool, ForwardPicksFirstMaximumAndFlatIndex) {
  const Context ctx;
  // n=2, c=1, 2x4 -> 1x2 per image. Image 1 has a tie in its first window.
  const std::vector<float> x = {1, 5, 2,  2,   //
                                3, 0, 2,  1,   //
                                7, 1, -1, -2,  //
                                7, 7, -3, -1};
  std::vector<float> y(4);
  std::vector<int32_t> argmax(4);
  MaxPoolForward<float>(ctx, 2, 1, 2, 4, 2, x.data(), y.data(), argmax.data());
  EXPECT_EQ(y, (std::vector<float>{5, 2, 7, -1}));
  // Image 0 window 1: the 2 at index 2 comes before the 2 at index 3 and 6.
  EXPECT_EQ(argmax, (std::vector<int32_t>{1, 2, 8, 10}));

  std::vector<float> dx(x.size(), -1.0f);
  const std::vector<float> dy = {10, 20, 30, 40};
  MaxPoolBackward<float>(ctx, 2, 1, 2, 4, 2, dy.data(), argmax.data(), dx.data());
  std::vector<float> want(x.size(), 0.0f);
  want[1] = 10;
  want[2] = 20;
  want[8] = 30;
  want[10] = 40;
  EXPECT_EQ(dx, want);
}

// The fused ReLU gives bit for bit what ReLU then max-pool give: outputs,
// and input gradients routed through argmax (ties, all-negative windows,
// zeros, -0 and NaN included).
TEST(MaxPool, FusedReluEqualsReluThenPool) {
  const Context ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int n = 3, c = 2, h = 4, w = 6, size = 2;
  std::vector<float> x(static_cast<size_t>(n) * c * h * w);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::round(4.0f * std::sin(1.7f * i)) * 0.5f;
  x[0] = -1.0f, x[1] = -2.0f, x[6] = -0.5f, x[7] = -3.0f;  // a window with no positive value
  x[2] = 0.0f, x[3] = -0.0f, x[8] = -1.0f, x[9] = 0.0f;     // one of zeros and -0
  x[14] = nan;                                             // NaN first in its window
  const size_t out = x.size() / 4;
  std::vector<float> dy(out);
  for (size_t i = 0; i < out; ++i) dy[i] = 1.0f + static_cast<float>(i);

  // Reference: ReLU, then max-pool; backward through the pool, then the ReLU.
  std::vector<float> r(x.size()), y_ref(out), dr(x.size()), dx_ref(x.size());
  std::vector<int32_t> arg_ref(out);
  ReluForward<float>(ctx, x.size(), x.data(), r.data());
  MaxPoolForward<float>(ctx, n, c, h, w, size, r.data(), y_ref.data(), arg_ref.data());
  MaxPoolBackward<float>(ctx, n, c, h, w, size, dy.data(), arg_ref.data(), dr.data());
  ReluBackward<float>(ctx, x.size(), r.data(), dr.data(), dx_ref.data());

  std::vector<float> y(out), dx(x.size(), -7.0f);
  std::vector<int32_t> arg(out);
  MaxPoolForward<float>(ctx, n, c, h, w, size, x.data(), y.data(), arg.data(), /*relu=*/true);
  MaxPoolBackward<float>(ctx, n, c, h, w, size, dy.data(), arg.data(), dx.data());
  ASSERT_EQ(std::memcmp(y.data(), y_ref.data(), out * sizeof(float)), 0);
  ASSERT_EQ(std::memcmp(dx.data(), dx_ref.data(), x.size() * sizeof(float)), 0);
  EXPECT_EQ(arg[0], -1);  // the all-negative window routes nothing
  EXPECT_TRUE(std::isnan(y[4]));  // window (1, 1) of image 0, channel 0
}

TEST(MaxPool, LargeBatchMatchesPerWindowMaximum) {
  // Big enough for the parallel loop; every output is its window's maximum.
  const Context ctx;
  const int n = 16, c = 8, h = 28, w = 28, size = 2;
  std::vector<double> x(static_cast<size_t>(n) * c * h * w);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  std::vector<double> y(x.size() / 4);
  std::vector<int32_t> argmax(y.size());
  MaxPoolForward<double>(ctx, n, c, h, w, size, x.data(), y.data(), argmax.data());
  for (int plane = 0; plane < n * c; ++plane) {
    for (int p = 0; p < h / 2; ++p) {
      for (int q = 0; q < w / 2; ++q) {
        const size_t base = static_cast<size_t>(plane) * h * w;
        double best = -2.0;
        for (int dr = 0; dr < 2; ++dr)
          for (int ds = 0; ds < 2; ++ds)
            best = std::max(best, x[base + (2 * p + dr) * w + 2 * q + ds]);
        const size_t o = (static_cast<size_t>(plane) * (h / 2) + p) * (w / 2) + q;
        ASSERT_EQ(y[o], best);
        ASSERT_EQ(x[argmax[o]], best);
      }
    }
  }
}

TEST(Relu, ForwardClampsAndPassesNan) {
  const Context ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-2.0f, -0.0f, 0.0f, 3.5f, nan};
  std::vector<float> y(x.size());
  ReluForward<float>(ctx, x.size(), x.data(), y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 3.5f);
  EXPECT_TRUE(std::isnan(y[4]));
}

TEST(Relu, BackwardInPlace) {
  const Context ctx;
  const size_t count = 100000;  // above the parallel threshold
  std::vector<float> y(count), g(count);
  for (size_t i = 0; i < count; ++i) {
    y[i] = (i % 3 == 0) ? 0.0f : static_cast<float>(i);
    g[i] = static_cast<float>(i % 7) + 1.0f;
  }
  ReluBackward<float>(ctx, count, y.data(), g.data(), g.data());
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(g[i], (i % 3 == 0) ? 0.0f : static_cast<float>(i % 7) + 1.0f) << i;
  }
}

}  // namespace
}  // namespace chorus::kernels
