// FP64 finite-difference gradient checks for every op with a backward pass:
// Linear, Conv2d (pad 2, odd shapes, stride 2), MaxPool, ReLU, BatchNorm
// (training mode) and SoftmaxCrossEntropy.
//
// Each op's output y is reduced to a scalar by a random projection L = sum(y * r)
// (r fixed), so dL/dy = r is fed to the backward pass and the analytic gradient
// is compared with the central difference (L(v + h) - L(v - h)) / 2h, h = 1e-6.
//
// Tolerance. In double, the central difference has truncation error
// h^2/6 |L'''| ~ 1e-13 and rounding error about eps * |L| / h ~ 2e-16 * 10 / 1e-6
// = 2e-9 for the losses here (|L| <= ~10). So we ask for a relative error of
// 1e-6 with an absolute floor of 1e-8 for tiny gradients: a wrong index, a
// missing term or a factor off in the backward pass gives errors of order 1.
// Inputs avoid kinks (ReLU near 0, MaxPool near-ties) by more than h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-8;

std::vector<double> Random(size_t count, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(count);
  for (double& e : v) e = dist(rng);
  return v;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// Compares `analytic` with central differences of `loss` in each element of *param.
void CheckGradient(const std::string& what, std::vector<double>* param,
                   const std::vector<double>& analytic, const std::function<double()>& loss) {
  ASSERT_EQ(param->size(), analytic.size()) << what;
  for (size_t i = 0; i < param->size(); ++i) {
    const double saved = (*param)[i];
    (*param)[i] = saved + kStep;
    const double plus = loss();
    (*param)[i] = saved - kStep;
    const double minus = loss();
    (*param)[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    const double tol = kRelTol * std::max(std::abs(numeric), std::abs(analytic[i])) + kAbsTol;
    ASSERT_NEAR(analytic[i], numeric, tol) << what << "[" << i << "]";
  }
}

TEST(GradientCheck, Linear) {
  const Context ctx;
  const int n = 3, in = 5, out = 4;
  auto x = Random(n * in, 1), w = Random(out * in, 2), b = Random(out, 3), r = Random(n * out, 4);
  std::vector<double> y(n * out);
  auto loss = [&] {
    LinearForward<double>(ctx, n, in, out, x.data(), w.data(), b.data(), y.data());
    return Dot(y, r);
  };
  std::vector<double> dx(n * in), dw(out * in), db(out);
  LinearBackward<double>(ctx, n, in, out, x.data(), w.data(), r.data(), dx.data(), dw.data(),
                         db.data());
  CheckGradient("linear dx", &x, dx, loss);
  CheckGradient("linear dw", &w, dw, loss);
  CheckGradient("linear db", &b, db, loss);
}

void CheckConvGradient(const Conv2dShape& s) {
  const Context ctx;
  const size_t x_size = static_cast<size_t>(s.n) * s.c * s.h * s.w;
  const size_t w_size = static_cast<size_t>(s.k) * s.c * s.r * s.s;
  const size_t y_size = static_cast<size_t>(s.n) * s.k * s.OutH() * s.OutW();
  auto x = Random(x_size, 11), w = Random(w_size, 12), b = Random(s.k, 13), r = Random(y_size, 14);
  std::vector<double> y(y_size), workspace(s.WorkspaceElems());
  auto loss = [&] {
    Conv2dForward<double>(ctx, s, x.data(), w.data(), b.data(), y.data(), workspace.data());
    return Dot(y, r);
  };
  std::vector<double> dx(x_size), dw(w_size), db(s.k);
  Conv2dBackward<double>(ctx, s, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(),
                         workspace.data());
  CheckGradient("conv dx", &x, dx, loss);
  CheckGradient("conv dw", &w, dw, loss);
  CheckGradient("conv db", &b, db, loss);
}

TEST(GradientCheck, Conv2dPad2OddShape) {
  Conv2dShape s;
  s.n = 3;
  s.c = 2;
  s.h = 7;
  s.w = 5;
  s.k = 3;
  s.r = 5;
  s.s = 3;
  s.pad = 2;
  s.stride = 1;
  CheckConvGradient(s);
}

TEST(GradientCheck, Conv2dStride2) {
  Conv2dShape s;
  s.n = 2;
  s.c = 3;
  s.h = 8;
  s.w = 9;
  s.k = 2;
  s.r = 3;
  s.s = 3;
  s.pad = 1;
  s.stride = 2;
  CheckConvGradient(s);
}

TEST(GradientCheck, MaxPool) {
  const Context ctx;
  const int n = 2, c = 3, h = 6, w = 4, size = 2;
  const size_t x_size = static_cast<size_t>(n) * c * h * w;
  const size_t y_size = x_size / (size * size);
  // Distinct values 1e-3 apart (>> h) in random order: no window is near a tie.
  std::vector<double> x(x_size);
  std::iota(x.begin(), x.end(), 0.0);
  std::shuffle(x.begin(), x.end(), std::mt19937_64(21));
  for (double& v : x) v = v * 1e-3 - 0.05;
  const auto r = Random(y_size, 22);
  std::vector<double> y(y_size);
  std::vector<int32_t> argmax(y_size);
  auto loss = [&] {
    MaxPoolForward<double>(ctx, n, c, h, w, size, x.data(), y.data(), argmax.data());
    return Dot(y, r);
  };
  loss();
  std::vector<double> dx(x_size);
  MaxPoolBackward<double>(ctx, n, c, h, w, size, r.data(), argmax.data(), dx.data());
  CheckGradient("maxpool dx", &x, dx, loss);
}

TEST(GradientCheck, Relu) {
  const Context ctx;
  const size_t count = 40;
  // |x| in [0.01, 1]: at least 1e4 steps away from the kink at 0.
  auto x = Random(count, 31, 0.01, 1.0);
  const auto sign = Random(count, 32);
  for (size_t i = 0; i < count; ++i) x[i] *= sign[i] < 0 ? -1.0 : 1.0;
  const auto r = Random(count, 33);
  std::vector<double> y(count);
  auto loss = [&] {
    ReluForward<double>(ctx, count, x.data(), y.data());
    return Dot(y, r);
  };
  loss();
  std::vector<double> dx(count);
  ReluBackward<double>(ctx, count, y.data(), r.data(), dx.data());
  CheckGradient("relu dx", &x, dx, loss);
}

TEST(GradientCheck, BatchNormTrain) {
  const Context ctx;
  BatchNormShape s;
  s.n = 4;
  s.c = 3;
  s.hw = 5;
  const size_t size = static_cast<size_t>(s.n) * s.c * s.hw;
  auto x = Random(size, 41, -2.0, 3.0), gamma = Random(s.c, 42, 0.5, 1.5), beta = Random(s.c, 43),
       r = Random(size, 44);
  std::vector<double> y(size), mean(s.c), inv_std(s.c), run_mean(s.c, 0.0), run_var(s.c, 1.0);
  auto loss = [&] {
    BatchNormForwardTrain<double>(ctx, s, x.data(), gamma.data(), beta.data(), y.data(),
                                  mean.data(), inv_std.data(), run_mean.data(), run_var.data());
    return Dot(y, r);
  };
  loss();
  std::vector<double> dx(size), dgamma(s.c), dbeta(s.c);
  BatchNormBackward<double>(ctx, s, x.data(), gamma.data(), mean.data(), inv_std.data(), r.data(),
                            dx.data(), dgamma.data(), dbeta.data());
  CheckGradient("batchnorm dx", &x, dx, loss);
  CheckGradient("batchnorm dgamma", &gamma, dgamma, loss);
  CheckGradient("batchnorm dbeta", &beta, dbeta, loss);
}

TEST(GradientCheck, SoftmaxCrossEntropy) {
  const Context ctx;
  const int n = 5, classes = 7;
  auto logits = Random(n * classes, 51, -3.0, 3.0);
  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  // The loss itself is the scalar; scale 1 makes dlogits its gradient.
  auto loss = [&] {
    return SoftmaxCrossEntropy<double>(ctx, n, classes, logits.data(), labels.data(), 1.0, nullptr,
                                       nullptr);
  };
  std::vector<double> dlogits(n * classes);
  SoftmaxCrossEntropy<double>(ctx, n, classes, logits.data(), labels.data(), 1.0, dlogits.data(),
                              nullptr);
  CheckGradient("softmax-xent dlogits", &logits, dlogits, loss);
}

}  // namespace
}  // namespace chorus::kernels
