// SoftmaxCrossEntropy in closed form: uniform logits give log(classes), the
// correct count uses the first maximum, huge logits stay finite (the
// log-sum-exp shift), and dlogits carries the loss scale over N.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

TEST(SoftmaxCrossEntropy, UniformLogitsGiveLogClasses) {
  const Context ctx;
  const int n = 4, classes = 10;
  const std::vector<float> logits(n * classes, 3.0f);
  const std::vector<int32_t> labels = {0, 3, 9, 5};
  std::vector<float> dlogits(n * classes);
  const double loss = SoftmaxCrossEntropy<float>(ctx, n, classes, logits.data(), labels.data(),
                                                 1.0f, dlogits.data(), nullptr);
  // exp and log of exact small values: float-level agreement.
  EXPECT_NEAR(loss, std::log(10.0), 1e-6);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < classes; ++j) {
      const double want = (0.1 - (j == labels[i] ? 1.0 : 0.0)) / n;
      EXPECT_NEAR(dlogits[i * classes + j], want, 1e-7);
    }
  }
}

TEST(SoftmaxCrossEntropy, CountsCorrectRowsWithFirstMaximum) {
  const Context ctx;
  const int n = 5, classes = 3;
  const std::vector<double> logits = {
      1,  2,  3,  // argmax 2
      5,  1,  0,  // argmax 0
      2,  2,  1,  // tie: first maximum is 0
      0,  4,  4,  // tie: first maximum is 1
      -1, -2, -3  // argmax 0
  };
  // Both tie rows are labelled with their first maximum: a last-maximum rule
  // would miss both.
  const std::vector<int32_t> labels = {2, 1, 0, 1, 0};
  int correct = -1;
  SoftmaxCrossEntropy<double>(ctx, n, classes, logits.data(), labels.data(), 1.0, nullptr,
                              &correct);
  EXPECT_EQ(correct, 4);  // rows 0, 2, 3 and 4
}

TEST(SoftmaxCrossEntropy, HugeLogitsStayFiniteAndScaleApplies) {
  const Context ctx;
  const int n = 2, classes = 3;
  const std::vector<float> logits = {1000.0f, 0.0f, -1000.0f, 500.0f, 500.0f, 500.0f};
  const std::vector<int32_t> labels = {0, 1};
  std::vector<float> dlogits(n * classes);
  const float scale = 1024.0f;
  const double loss = SoftmaxCrossEntropy<float>(ctx, n, classes, logits.data(), labels.data(),
                                                 scale, dlogits.data(), nullptr);
  // Row 0: loss 0 (exp(-1000) underflows); row 1: log 3. Mean over 2 rows.
  EXPECT_NEAR(loss, std::log(3.0) / 2, 1e-9);
  // Row 0 gradient ~0; row 1: scale * (1/3 - onehot) / 2, within float rounding.
  EXPECT_NEAR(dlogits[0], 0.0f, 1e-6);
  EXPECT_NEAR(dlogits[1], 0.0f, 1e-6);
  EXPECT_NEAR(dlogits[3], scale * (1.0 / 3) / 2, 1e-3);
  EXPECT_NEAR(dlogits[4], scale * (1.0 / 3 - 1) / 2, 1e-3);
}

TEST(SoftmaxCrossEntropy, LargeBatchGradientRowsSumToZero) {
  // Big enough for the parallel loop: each row of softmax - onehot sums to 0.
  const Context ctx;
  const int n = 4096, classes = 10;
  std::vector<float> logits(static_cast<size_t>(n) * classes);
  std::vector<int32_t> labels(n);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.1f * static_cast<float>(i)) * 4;
  for (int i = 0; i < n; ++i) labels[i] = (i * 3) % classes;
  std::vector<float> dlogits(logits.size());
  int correct = 0;
  const double loss = SoftmaxCrossEntropy<float>(ctx, n, classes, logits.data(), labels.data(),
                                                 1.0f, dlogits.data(), &correct);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0);
  int want_correct = 0;
  for (int i = 0; i < n; ++i) {
    double sum = 0;
    int arg = 0;
    for (int j = 0; j < classes; ++j) {
      sum += dlogits[static_cast<size_t>(i) * classes + j];
      if (logits[static_cast<size_t>(i) * classes + j] >
          logits[static_cast<size_t>(i) * classes + arg])
        arg = j;
    }
    want_correct += arg == labels[i];
    // Ten float terms of size <= 1/n: rounding well below 1e-9.
    ASSERT_NEAR(sum, 0.0, 1e-9) << i;
  }
  EXPECT_EQ(correct, want_correct);
}

}  // namespace
}  // namespace chorus::kernels
