// Conv2dForward / Conv2dBackward against a naive direct convolution in double,
// over odd shapes, padding, stride 2, a single input channel (the CNN's first
// layer), thread counts 1-4, and more threads than workspace slots.
// Small-shape gradients are also checked by finite differences in
// gradient_check_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Index helpers for NCHW tensors.
size_t At(int n, int c, int h, int w, int channels, int height, int width) {
  return ((static_cast<size_t>(n) * channels + c) * height + h) * width + w;
}

// Direct convolution: y [N,K,P,Q] and, per output, sum |w x| + |b| (error scale).
void NaiveForward(const Conv2dShape& s, const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b, std::vector<double>* y,
                  std::vector<double>* magnitude) {
  const int p_out = s.OutH(), q_out = s.OutW();
  y->assign(static_cast<size_t>(s.n) * s.k * p_out * q_out, 0.0);
  magnitude->assign(y->size(), 0.0);
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int p = 0; p < p_out; ++p)
        for (int q = 0; q < q_out; ++q) {
          double sum = b[k], mag = std::abs(b[k]);
          for (int c = 0; c < s.c; ++c)
            for (int r = 0; r < s.r; ++r)
              for (int f = 0; f < s.s; ++f) {
                const int hh = p * s.stride - s.pad + r, ww = q * s.stride - s.pad + f;
                if (hh < 0 || hh >= s.h || ww < 0 || ww >= s.w) continue;
                const double term =
                    w[At(k, c, r, f, s.c, s.r, s.s)] * x[At(n, c, hh, ww, s.c, s.h, s.w)];
                sum += term;
                mag += std::abs(term);
              }
          (*y)[At(n, k, p, q, s.k, p_out, q_out)] = sum;
          (*magnitude)[At(n, k, p, q, s.k, p_out, q_out)] = mag;
        }
}

// Direct backward: dx, dw, db from dy.
void NaiveBackward(const Conv2dShape& s, const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& dy, std::vector<double>* dx, std::vector<double>* dw,
                   std::vector<double>* db) {
  const int p_out = s.OutH(), q_out = s.OutW();
  dx->assign(x.size(), 0.0);
  dw->assign(w.size(), 0.0);
  db->assign(s.k, 0.0);
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int p = 0; p < p_out; ++p)
        for (int q = 0; q < q_out; ++q) {
          const double g = dy[At(n, k, p, q, s.k, p_out, q_out)];
          (*db)[k] += g;
          for (int c = 0; c < s.c; ++c)
            for (int r = 0; r < s.r; ++r)
              for (int f = 0; f < s.s; ++f) {
                const int hh = p * s.stride - s.pad + r, ww = q * s.stride - s.pad + f;
                if (hh < 0 || hh >= s.h || ww < 0 || ww >= s.w) continue;
                (*dw)[At(k, c, r, f, s.c, s.r, s.s)] += g * x[At(n, c, hh, ww, s.c, s.h, s.w)];
                (*dx)[At(n, c, hh, ww, s.c, s.h, s.w)] += g * w[At(k, c, r, f, s.c, s.r, s.s)];
              }
        }
}

std::vector<double> ConvRandom(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(count);
  for (double& e : v) e = dist(rng);
  return v;
}

template <typename T>
std::vector<T> Cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Largest |got - want| / (scale + tiny) over all elements.
template <typename T>
double MaxScaledError(const std::vector<T>& got, const std::vector<double>& want, double scale) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / scale);
  }
  return worst;
}

// Runs forward and backward in T and compares with the naive double result.
// The tolerance is the dot-product error bound: (terms + 2) * eps(T) times the
// sum of magnitudes, where a term count is C*R*S for forward and at most
// N*P*Q (dw) or K*R*S (dx) for backward; inputs are in [-1, 1].
template <typename T>
void CheckConv(const Conv2dShape& s) {
  const int p_out = s.OutH(), q_out = s.OutW();
  const size_t x_size = static_cast<size_t>(s.n) * s.c * s.h * s.w;
  const size_t w_size = static_cast<size_t>(s.k) * s.c * s.r * s.s;
  const size_t y_size = static_cast<size_t>(s.n) * s.k * p_out * q_out;
  const auto x = ConvRandom(x_size, 1), w = ConvRandom(w_size, 2), b = ConvRandom(s.k, 3),
             dy = ConvRandom(y_size, 4);
  const double eps = std::numeric_limits<T>::epsilon();
  const Context ctx;
  std::vector<T> workspace(s.WorkspaceElems());

  std::vector<double> y_want, magnitude;
  NaiveForward(s, x, w, b, &y_want, &magnitude);
  const auto xt = Cast<T>(x), wt = Cast<T>(w), bt = Cast<T>(b), dyt = Cast<T>(dy);
  // NaN poison: every output element must be written, not scaled or accumulated.
  const T poison = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y(y_size, poison);
  Conv2dForward<T>(ctx, s, xt.data(), wt.data(), bt.data(), y.data(), workspace.data());
  const double fwd_terms = static_cast<double>(s.c) * s.r * s.s + 1;
  for (size_t i = 0; i < y_size; ++i) {
    // Inputs rounded to T add one more eps per term.
    ASSERT_NEAR(y[i], y_want[i], 2.0 * (fwd_terms + 2) * eps * (magnitude[i] + 1e-300))
        << "y[" << i << "]";
  }

  std::vector<double> dx_want, dw_want, db_want;
  NaiveBackward(s, x, w, dy, &dx_want, &dw_want, &db_want);
  std::vector<T> dx(x_size, poison), dw(w_size, poison), db(s.k, poison);
  Conv2dBackward<T>(ctx, s, xt.data(), wt.data(), dyt.data(), dx.data(), dw.data(), db.data(),
                    workspace.data());
  // |x|, |w|, |dy| <= 1, so each sum is bounded by its term count.
  const double dw_terms = static_cast<double>(s.n) * p_out * q_out;
  const double dx_terms = static_cast<double>(s.k) * s.r * s.s;
  EXPECT_LE(MaxScaledError(dw, dw_want, dw_terms), 2.0 * (dw_terms + 2) * eps);
  EXPECT_LE(MaxScaledError(db, db_want, dw_terms), 2.0 * (dw_terms + 2) * eps);
  EXPECT_LE(MaxScaledError(dx, dx_want, dx_terms), 2.0 * (dx_terms + 2) * eps);

  // dx == nullptr skips dx but still gives the same dw and db.
  std::vector<T> dw2(w_size, poison), db2(s.k, poison);
  Conv2dBackward<T>(ctx, s, xt.data(), wt.data(), dyt.data(), nullptr, dw2.data(), db2.data(),
                    workspace.data());
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

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

TEST(Conv2d, OddShapePad2MatchesNaive) {
  const auto s = Shape(3, 2, 7, 5, 3, 3, 5, 2, 1);
  CheckConv<double>(s);
  CheckConv<float>(s);
}

TEST(Conv2d, Stride2MatchesNaive) {
  const auto s = Shape(2, 3, 9, 8, 2, 3, 3, 1, 2);
  CheckConv<double>(s);
  CheckConv<float>(s);
}

TEST(Conv2d, NoPaddingMatchesNaive) {
  const auto s = Shape(2, 4, 6, 7, 5, 2, 3, 0, 1);
  CheckConv<double>(s);
  CheckConv<float>(s);
}

TEST(Conv2d, SingleInputChannelMatchesNaive) {
  // The CNN's first layer: 1 -> K channels, 5x5, pad 2 on 28x28.
  const auto s = Shape(5, 1, 28, 28, 4, 5, 5, 2, 1);
  CheckConv<double>(s);
  CheckConv<float>(s);
}

// Float convolutions go to oneDNN when the build has it: both backends meet
// the same error bounds, on the CNN's shapes too (conv2 with a short batch).
TEST(Conv2d, EveryBackendMatchesNaive) {
  for (ConvBackend backend : {ConvBackend::kAuto, ConvBackend::kIm2col}) {
    SetConvBackend(backend);
    SCOPED_TRACE(ConvUsesOnednn() ? "onednn" : "im2col");
    CheckConv<float>(Shape(3, 2, 7, 5, 3, 3, 5, 2, 1));
    CheckConv<float>(Shape(2, 3, 9, 8, 2, 3, 3, 1, 2));
    CheckConv<float>(Shape(3, 32, 14, 14, 64, 5, 5, 2, 1));
    CheckConv<float>(Shape(5, 1, 28, 28, 32, 5, 5, 2, 1));
  }
  SetConvBackend(ConvBackend::kAuto);
}

// Runs a test body with SetThreads(threads), restoring the previous count.
class Conv2dThreads : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = cpu::KernelThreads(); }
  void TearDown() override { SetThreads(saved_); }

 private:
  int saved_ = 1;
};

TEST_F(Conv2dThreads, ResultsDoNotDependOnThreadCount) {
  // Odd thread counts split images and column rows unevenly.
  const auto s = Shape(7, 5, 11, 9, 6, 5, 5, 2, 1);
  for (int threads : {1, 2, 3}) {
    SetThreads(threads);
    SCOPED_TRACE(threads);
    CheckConv<double>(s);
    CheckConv<float>(s);
  }
}

TEST_F(Conv2dThreads, MoreThreadsThanScratchSlots) {
  const auto s = Shape(7, 16, 40, 40, 4, 5, 5, 2, 1);
  // The workspace holds scratch for `slots` images (a batch of one gives the
  // per-image size). With more threads than slots, images go in rounds of
  // `slots`; 7 images make a short last round.
  Conv2dShape one = s;
  one.n = 1;
  const size_t slots = s.WorkspaceElems() / one.WorkspaceElems();
  ASSERT_EQ(s.WorkspaceElems() % one.WorkspaceElems(), 0u);
  ASSERT_GE(slots, 1u);
  ASSERT_LT(slots, 4u);
  ASSERT_NE(s.n % slots, 0u);
  SetThreads(4);
  CheckConv<double>(s);
  CheckConv<float>(s);
}

TEST(Conv2d, WorkspaceIsBounded) {
  // The CNN's conv2 with a large batch: the workspace does not grow with N.
  const auto small = Shape(1024, 32, 14, 14, 64, 5, 5, 2, 1);
  const auto large = Shape(8192, 32, 14, 14, 64, 5, 5, 2, 1);
  EXPECT_EQ(small.WorkspaceElems(), large.WorkspaceElems());
  EXPECT_LE(large.WorkspaceElems() * sizeof(float), size_t{16} << 20);
}

}  // namespace
}  // namespace chorus::kernels
