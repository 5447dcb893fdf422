// Tests of the layer wrappers: shapes, parameter specs (names, kinds, PyTorch
// init bounds), and that bound parameters are used with the [out, in] layout.
// The ops themselves are checked against FP64 finite differences in kernels/.
#include "trainer/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace chorus::trainer {
namespace {

TEST(Layers, ConvShapesAndParameterSpecs) {
  Conv2d conv("conv2", SampleShape{32, 14, 14}, 64, 5, 2);
  EXPECT_EQ(conv.output_shape().c, 64);
  EXPECT_EQ(conv.output_shape().h, 14);
  EXPECT_EQ(conv.output_shape().w, 14);
  const auto params = conv.Parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].suffix, "weight");
  EXPECT_EQ(params[0].shape, (std::vector<int64_t>{64, 32, 5, 5}));
  EXPECT_EQ(params[0].kind, ParamKind::kWeight);
  EXPECT_EQ(params[1].shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(params[1].kind, ParamKind::kBias);
  // PyTorch: bound = 1 / sqrt(fan_in), fan_in = 32 * 5 * 5 = 800, for weight and bias.
  EXPECT_DOUBLE_EQ(params[0].init.value, 1.0 / std::sqrt(800.0));
  EXPECT_DOUBLE_EQ(params[1].init.value, 1.0 / std::sqrt(800.0));
  EXPECT_EQ(params[0].init.type, InitRule::Type::kUniform);
}

TEST(Layers, PoolAndBatchNormShapes) {
  MaxPool2d pool(SampleShape{32, 28, 28}, 2);
  EXPECT_EQ(pool.output_shape().Elements(), 32u * 14 * 14);
  EXPECT_TRUE(pool.Parameters().empty());
  BatchNorm2d bn("bn1", SampleShape{32, 28, 28});
  const auto params = bn.Parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].kind, ParamKind::kBnScale);
  EXPECT_EQ(params[0].init.type, InitRule::Type::kConstant);
  EXPECT_EQ(params[0].init.value, 1.0);
  EXPECT_EQ(params[1].kind, ParamKind::kBnShift);
  EXPECT_EQ(params[1].init.value, 0.0);
  const auto buffers = bn.Buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].suffix, "running_mean");
  EXPECT_EQ(buffers[0].init.value, 0.0);
  EXPECT_EQ(buffers[1].suffix, "running_var");
  EXPECT_EQ(buffers[1].init.value, 1.0);
}

TEST(Layers, LinearUsesOutByInWeightLayout) {
  // w [2, 3] = [[1, 2, 3], [4, 5, 6]], b = [0.5, -1]; x [1, 3] = [1, 0, -1].
  Linear fc("fc", 3, 2);
  const std::vector<float> w = {1, 2, 3, 4, 5, 6}, b = {0.5f, -1.0f};
  std::vector<float> dw(6), db(2);
  const float* weights[] = {w.data(), b.data()};
  float* grads[] = {dw.data(), db.data()};
  fc.Bind(weights, grads, {});
  kernels::Context ctx;
  LayerRun run{&ctx, true, nullptr};
  const std::vector<float> x = {1, 0, -1};
  std::vector<float> y(2);
  fc.Forward(run, 1, x.data(), y.data());
  // Small integers: every value is exact in float.
  EXPECT_EQ(y[0], 1 - 3 + 0.5f);
  EXPECT_EQ(y[1], 4 - 6 - 1.0f);
  const std::vector<float> dy = {1, 2};
  std::vector<float> dx(3);
  fc.Backward(run, 1, x.data(), y.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{1 + 8, 2 + 10, 3 + 12}));  // dy w
  EXPECT_EQ(dw, (std::vector<float>{1, 0, -1, 2, 0, -2}));      // dy^T x
  EXPECT_EQ(db, (std::vector<float>{1, 2}));
}

TEST(Layers, BatchNormTrainingUpdatesRunningStatsEvalUsesThem) {
  BatchNorm2d bn("bn", SampleShape{1, 1, 2});
  const std::vector<float> gamma = {1.0f}, beta = {0.0f};
  std::vector<float> dgamma(1), dbeta(1), mean = {0.0f}, var = {1.0f};
  const float* weights[] = {gamma.data(), beta.data()};
  float* grads[] = {dgamma.data(), dbeta.data()};
  float* buffers[] = {mean.data(), var.data()};
  bn.Bind(weights, grads, buffers);
  kernels::Context ctx;
  // Two samples of [1, 3] and [5, 7]: batch mean 4, unbiased var 20/3.
  const std::vector<float> x = {1, 3, 5, 7};
  std::vector<float> y(4);
  LayerRun train{&ctx, true, nullptr};
  bn.Forward(train, 2, x.data(), y.data());
  // running = 0.9 * old + 0.1 * batch (PyTorch momentum 0.1); float rounding only.
  EXPECT_NEAR(mean[0], 0.4, 1e-6);
  EXPECT_NEAR(var[0], 0.9 + 0.1 * 20.0 / 3.0, 1e-6);
  // Training output is normalised with the biased batch variance 5: (1 - 4) / sqrt(5 + eps).
  EXPECT_NEAR(y[0], -3.0 / std::sqrt(5.0 + 1e-5), 1e-5);
  LayerRun eval{&ctx, false, nullptr};
  bn.Forward(eval, 2, x.data(), y.data());
  EXPECT_NEAR(y[0], (1.0 - mean[0]) / std::sqrt(var[0] + 1e-5), 1e-5);
  EXPECT_NEAR(mean[0], 0.4, 1e-6) << "eval must not update running stats";
}

}  // namespace
}  // namespace chorus::trainer
