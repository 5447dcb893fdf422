// BatchNorm statistics in closed form: evaluation with given running stats,
// training output moments, saved mean / inverse std, and the momentum update of
// the running stats with the unbiased variance. Gradients are checked by finite
// differences in gradient_check_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

TEST(BatchNorm, EvalUsesRunningStats) {
  const Context ctx;
  BatchNormShape s;
  s.n = 2;
  s.c = 2;
  s.hw = 3;
  s.eps = 1e-3;
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<double> gamma = {2.0, -1.0}, beta = {0.5, 3.0};
  const std::vector<double> mean = {1.5, -4.0}, var = {4.0, 0.25};
  std::vector<double> y(x.size());
  BatchNormForwardEval<double>(ctx, s, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                               y.data());
  for (int i = 0; i < s.n; ++i) {
    for (int c = 0; c < s.c; ++c) {
      for (int j = 0; j < s.hw; ++j) {
        const size_t idx = (static_cast<size_t>(i) * s.c + c) * s.hw + j;
        const double want = (x[idx] - mean[c]) / std::sqrt(var[c] + s.eps) * gamma[c] + beta[c];
        // A handful of double operations on values below 100.
        EXPECT_NEAR(y[idx], want, 1e-12) << idx;
      }
    }
  }
}

TEST(BatchNorm, TrainNormalisesAndUpdatesRunningStats) {
  const Context ctx;
  BatchNormShape s;
  s.n = 3;
  s.c = 2;
  s.hw = 4;
  s.eps = 1e-5;
  s.momentum = 0.25;
  const int m = s.n * s.hw;
  std::vector<float> x(static_cast<size_t>(s.n) * s.c * s.hw);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) + 100.0f;
  const std::vector<float> gamma = {1.0f, 1.0f}, beta = {0.0f, 0.0f};
  std::vector<float> y(x.size()), save_mean(2), save_inv_std(2);
  std::vector<float> run_mean = {1.0f, -1.0f}, run_var = {2.0f, 0.5f};
  BatchNormForwardTrain<float>(ctx, s, x.data(), gamma.data(), beta.data(), y.data(),
                               save_mean.data(), save_inv_std.data(), run_mean.data(),
                               run_var.data());
  for (int c = 0; c < s.c; ++c) {
    double sum = 0, sq = 0, ysum = 0, ysq = 0;
    for (int i = 0; i < s.n; ++i) {
      for (int j = 0; j < s.hw; ++j) {
        const size_t idx = (static_cast<size_t>(i) * s.c + c) * s.hw + j;
        sum += x[idx];
        sq += static_cast<double>(x[idx]) * x[idx];
        ysum += y[idx];
        ysq += static_cast<double>(y[idx]) * y[idx];
      }
    }
    const double mean = sum / m;
    const double var = sq / m - mean * mean;  // exact enough: integers near 100
    // Float storage of values near 100 and 1: relative 1e-6 (a few float ulps).
    EXPECT_NEAR(save_mean[c], mean, 1e-6 * mean);
    EXPECT_NEAR(save_inv_std[c], 1.0 / std::sqrt(var + s.eps), 1e-6);
    // The output has mean 0 and biased variance var / (var + eps), up to float
    // rounding of m terms of size ~2 (1e-5).
    EXPECT_NEAR(ysum / m, 0.0, 1e-5);
    EXPECT_NEAR(ysq / m, var / (var + s.eps), 1e-5);
    const double init_mean = c == 0 ? 1.0 : -1.0, init_var = c == 0 ? 2.0 : 0.5;
    EXPECT_NEAR(run_mean[c], 0.75 * init_mean + 0.25 * mean, 1e-4);
    EXPECT_NEAR(run_var[c], 0.75 * init_var + 0.25 * var * m / (m - 1), 1e-5);
  }
}

}  // namespace
}  // namespace chorus::kernels
