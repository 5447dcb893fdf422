// Tests of the LARS and SGD updates on hand-computed examples, the LARS edge
// cases (zero weight norm, zero gradient norm) and the exclusion of biases and
// BatchNorm parameters from weight decay and the trust ratio.
#include "trainer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace chorus::trainer {
namespace {

// Expected values are computed in exact decimal arithmetic; the optimizer works
// in float, whose relative rounding is 6e-8 per operation and a handful of
// operations per element, so 1e-6 absolute on values of order 1 is ample.
constexpr double kTol = 1e-6;

std::vector<ParameterInfo> Table(std::initializer_list<std::pair<size_t, ParamKind>> entries) {
  std::vector<ParameterInfo> table;
  size_t offset = 0;
  int i = 0;
  for (const auto& [count, kind] : entries) {
    ParameterInfo info;
    info.name = "p";
    info.name += std::to_string(i++);
    info.shape = {static_cast<int64_t>(count)};
    info.offset = offset;
    info.count = count;
    info.kind = kind;
    table.push_back(std::move(info));
    offset += count;
  }
  return table;
}

std::unique_ptr<Optimizer> Make(OptimizerKind kind, double momentum, double wd, double eta,
                                std::vector<ParameterInfo> table) {
  OptimizerOptions o;
  o.kind = kind;
  o.momentum = momentum;
  o.weight_decay = wd;
  o.eta = eta;
  auto opt = Optimizer::Create(o, std::move(table));
  EXPECT_TRUE(opt.has_value());
  return std::move(*opt);
}

TEST(Sgd, MatchesHandComputedTwoSteps) {
  // Parameter 0: weight [2] (decayed); parameter 1: bias [1] (not decayed).
  auto opt = Make(OptimizerKind::kSgd, 0.9, 0.1, 0.0,
                  Table({{2, ParamKind::kWeight}, {1, ParamKind::kBias}}));
  std::vector<float> w = {1.0f, -2.0f, 3.0f};
  const std::vector<float> g = {0.5f, 0.25f, 1.0f};
  // Step 1: v = g + wd w = [0.6, 0.05 | 1]; w -= 0.1 v.
  opt->Step(w, g, 0.1);
  EXPECT_NEAR(w[0], 0.94, kTol);
  EXPECT_NEAR(w[1], -2.005, kTol);
  EXPECT_NEAR(w[2], 2.9, kTol);
  EXPECT_NEAR(opt->momentum()[0], 0.6, kTol);
  // Step 2: v = 0.9 v + g + wd w = [0.54 + 0.594, 0.045 + 0.0495 | 0.9 + 1].
  opt->Step(w, g, 0.1);
  EXPECT_NEAR(opt->momentum()[0], 1.134, kTol);
  EXPECT_NEAR(opt->momentum()[1], 0.0945, kTol);
  EXPECT_NEAR(opt->momentum()[2], 1.9, kTol);
  EXPECT_NEAR(w[0], 0.8266, kTol);
  EXPECT_NEAR(w[1], -2.01445, kTol);
  EXPECT_NEAR(w[2], 2.71, kTol);
}

TEST(Lars, AppliesTrustRatioToWeights) {
  // ||w|| = 5, ||g|| = 2; local_lr = 0.01 * 5 / (2 + 0.1 * 5) = 0.02.
  auto opt = Make(OptimizerKind::kLars, 0.9, 0.1, 0.01, Table({{2, ParamKind::kWeight}}));
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {0.0f, 2.0f};
  opt->Step(w, g, 2.0);
  EXPECT_NEAR(opt->last_local_lr()[0], 0.02, 1e-12);  // computed in double
  // v = 2 * 0.02 * (g + 0.1 w) = 0.04 * [0.3, 2.4] = [0.012, 0.096].
  EXPECT_NEAR(opt->momentum()[0], 0.012, kTol);
  EXPECT_NEAR(opt->momentum()[1], 0.096, kTol);
  EXPECT_NEAR(w[0], 2.988, kTol);
  EXPECT_NEAR(w[1], 3.904, kTol);
  // Step 2: ||w|| = sqrt(2.988^2 + 3.904^2), ||g|| = 2; v = 0.9 v + lr * local * (g + wd w).
  const double wn = std::sqrt(2.988 * 2.988 + 3.904 * 3.904);
  const double local = 0.01 * wn / (2.0 + 0.1 * wn);
  const double v0 = 0.9 * 0.012 + 2.0 * local * (0.0 + 0.1 * 2.988);
  const double v1 = 0.9 * 0.096 + 2.0 * local * (2.0 + 0.1 * 3.904);
  opt->Step(w, g, 2.0);
  EXPECT_NEAR(opt->last_local_lr()[0], local, 1e-7);  // w itself is float-rounded
  EXPECT_NEAR(w[0], 2.988 - v0, kTol);
  EXPECT_NEAR(w[1], 3.904 - v1, kTol);
}

// With the members' mean gradient at hand (SetMeanGradient), the trust
// ratio takes its norm; the step still follows the node's own gradient. A
// skipped step calls it without a gradient.
TEST(Lars, TrustRatioFromTheMembersMeanGradient) {
  auto opt = Make(OptimizerKind::kLars, 0.9, 0.1, 0.01, Table({{2, ParamKind::kWeight}}));
  const std::vector<float> mean = {0.0f, 0.5f};  // ||mean|| = 0.5
  std::vector<size_t> given;
  opt->SetMeanGradient([&](std::span<const float> gradient) -> std::span<const float> {
    given.push_back(gradient.size());
    return mean;
  });
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {0.0f, 2.0f};
  opt->Step(w, g, 2.0);
  // ||w|| = 5: local_lr = 0.01 * 5 / (0.5 + 0.1 * 5) = 0.05, where its own
  // gradient's norm (2) gives 0.02.
  EXPECT_NEAR(opt->last_local_lr()[0], 0.05, 1e-12);
  EXPECT_NEAR(w[1], 4.0 - 2.0 * 0.05 * (2.0 + 0.1 * 4.0), kTol) << "the step follows its own gradient";
  opt->SkipStep();
  EXPECT_EQ(given, (std::vector<size_t>{2, 0}));
}

// norm_batch_ratio b / B = 1/16: the trust ratio sees the global batch's
// estimated norm, ||g_B||^2 = D + (S - D) / 16 with D the product of
// successive gradients and S the square (EMAs, debiased: after one pair, the
// pair's own values).
// LARS without momentum or decay, estimating the norm of 16 nodes' batches.
OptimizerOptions SixteenNodesLars() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kLars;
  o.momentum = 0.0;
  o.weight_decay = 0.0;
  o.eta = 0.01;
  o.norm_batch_ratio = 1.0 / 16;
  return o;
}

TEST(Lars, GlobalBatchNormFromSuccessiveGradients) {
  OptimizerOptions o = SixteenNodesLars();
  auto made = Optimizer::Create(o, Table({{4, ParamKind::kWeight}, {1, ParamKind::kBias}}));
  ASSERT_TRUE(made.has_value());
  Optimizer& opt = **made;
  std::vector<float> w = {30.0f, 40.0f, 0.0f, 0.0f, 1.0f};  // ||w|| = 50
  // Step 1: no predecessor, the local norm: ||g|| = 2, local_lr = 0.01 * 50 / 2.
  opt.Step(w, std::vector<float>{1, 1, 1, 1, 1}, 1.0);
  EXPECT_DOUBLE_EQ(opt.last_norm_ratio()[0], 1.0);
  EXPECT_NEAR(opt.last_local_lr()[0], 0.25, 1e-9);
  // Step 2: a gradient orthogonal to the first (pure noise): D = 0, so the
  // global batch's norm is sqrt(S / 16) = 2 / 4 and the ratio four times larger.
  const double wn = std::sqrt(static_cast<double>(w[0]) * w[0] + static_cast<double>(w[1]) * w[1] +
                              static_cast<double>(w[2]) * w[2] + static_cast<double>(w[3]) * w[3]);
  opt.Step(w, std::vector<float>{1, -1, 1, -1, 1}, 1.0);
  EXPECT_NEAR(opt.last_norm_ratio()[0], 0.25, 1e-12);
  EXPECT_NEAR(opt.last_local_lr()[0], 0.01 * wn / 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(opt.last_local_lr()[1], 1.0);  // the bias: no trust ratio at all
  // Step 3: the same gradient again (no noise between steps 2 and 3): the
  // EMAs over steps 2 and 3 (0.9 and 1, debiased by 1 - 0.81) give
  // D = (0.09 * 0 + 0.1 * 4) / 0.19 and S = 4.
  opt.Step(w, std::vector<float>{1, -1, 1, -1, 1}, 1.0);
  const double d = 0.4 / 0.19, sq = 4.0;
  EXPECT_NEAR(opt.last_norm_ratio()[0], std::sqrt((d + (sq - d) / 16) / sq), 1e-9);

  // Without the ratio (1: an all-reduce node), the local norm as before.
  o.norm_batch_ratio = 1.0;
  auto plain = Optimizer::Create(o, Table({{4, ParamKind::kWeight}, {1, ParamKind::kBias}}));
  ASSERT_TRUE(plain.has_value());
  std::vector<float> w2 = {30.0f, 40.0f, 0.0f, 0.0f, 1.0f};
  (*plain)->Step(w2, std::vector<float>{1, 1, 1, 1, 1}, 1.0);
  (*plain)->Step(w2, std::vector<float>{1, -1, 1, -1, 1}, 1.0);
  EXPECT_DOUBLE_EQ((*plain)->last_norm_ratio()[0], 1.0);
}

// peer_products: D is the product with a peer's gradient of the same step
// (SetPeerProducts), from the first step on; a step without products (or
// one skipped, which drops them) takes the node's own norm.
TEST(Lars, GlobalBatchNormFromPeerProducts) {
  OptimizerOptions o = SixteenNodesLars();
  o.peer_products = true;
  auto made = Optimizer::Create(o, Table({{4, ParamKind::kWeight}, {1, ParamKind::kBias}}));
  ASSERT_TRUE(made.has_value());
  Optimizer& opt = **made;
  std::vector<float> w = {30.0f, 40.0f, 0.0f, 0.0f, 1.0f};
  const std::vector<float> g = {1, 1, 1, 1, 1};  // S = 4 on the weight
  // Step 1, a peer's product of 1: ||g_B||^2 = 1 + 3 / 16.
  opt.SetPeerProducts({1.0, 123.0});
  opt.Step(w, g, 1.0);
  EXPECT_NEAR(opt.last_norm_ratio()[0], std::sqrt((1.0 + 3.0 / 16) / 4.0), 1e-12);
  EXPECT_DOUBLE_EQ(opt.last_local_lr()[1], 1.0);  // the bias: no trust ratio at all
  // Step 2, no products: the node's own norm, the EMAs as they were.
  opt.Step(w, g, 1.0);
  EXPECT_DOUBLE_EQ(opt.last_norm_ratio()[0], 1.0);
  // A skipped step drops the products given for it.
  opt.SetPeerProducts({4.0, 0.0});
  opt.SkipStep();
  opt.Step(w, g, 1.0);
  EXPECT_DOUBLE_EQ(opt.last_norm_ratio()[0], 1.0);
  // Step 4, a product above the square is clamped to it: the own norm, never
  // a larger step. The EMAs over steps 1 and 4 (0.9 and 1, debiased by
  // 1 - 0.81): D = (0.09 * 1 + 0.1 * 9) / 0.19 > S = 4, clamped to 4.
  opt.SetPeerProducts({9.0, 0.0});
  opt.Step(w, g, 1.0);
  EXPECT_NEAR(opt.last_norm_ratio()[0], 1.0, 1e-12);
  // Products of another size are ignored.
  opt.SetPeerProducts({1.0});
  opt.Step(w, g, 1.0);
  EXPECT_DOUBLE_EQ(opt.last_norm_ratio()[0], 1.0);
}

// SetMeanSquares: the trust ratio takes the members' mean gradient's norm
// for that Step only, not below the floor times the node's own square; a
// skipped step drops it, and another size is ignored.
TEST(Lars, MeanSquaresReplaceTheOwnNormAboveTheirFloor) {
  auto opt = Make(OptimizerKind::kLars, 0.0, 0.0, 0.01, Table({{4, ParamKind::kWeight}, {1, ParamKind::kBias}}));
  const std::vector<float> g = {1, 1, 1, 1, 1};  // own norm 2 on the weight
  auto lr_with = [&](std::vector<double> squares) {
    std::vector<float> w = {30.0f, 40.0f, 0.0f, 0.0f, 1.0f};  // norm 50
    if (!squares.empty()) opt->SetMeanSquares(std::move(squares), 1.0 / 16);
    opt->Step(w, g, 1.0);
    return opt->last_local_lr()[0];
  };
  EXPECT_NEAR(lr_with({}), 0.01 * 50 / 2, 1e-12);
  EXPECT_NEAR(lr_with({1.0, 7.0}), 0.01 * 50 / 1, 1e-12);
  EXPECT_NEAR(lr_with({0.01, 7.0}), 0.01 * 50 / 0.5, 1e-12);  // the floor: 4 / 16
  EXPECT_NEAR(lr_with({1.0}), 0.01 * 50 / 2, 1e-12);
  opt->SetMeanSquares({1.0, 7.0}, 1.0 / 16);
  opt->SkipStep();
  EXPECT_NEAR(lr_with({}), 0.01 * 50 / 2, 1e-12);
}

TEST(Lars, ZeroWeightNormUsesUnitRatio) {
  auto opt = Make(OptimizerKind::kLars, 0.9, 0.1, 0.01, Table({{2, ParamKind::kWeight}}));
  std::vector<float> w = {0.0f, 0.0f};
  const std::vector<float> g = {1.0f, -3.0f};
  opt->Step(w, g, 0.5);
  EXPECT_EQ(opt->last_local_lr()[0], 1.0);
  // v = 0.5 * 1 * (g + 0.1 * 0) -> w = -0.5 g.
  EXPECT_NEAR(w[0], -0.5, kTol);
  EXPECT_NEAR(w[1], 1.5, kTol);
}

TEST(Lars, ZeroGradientNormUsesUnitRatio) {
  auto opt = Make(OptimizerKind::kLars, 0.9, 0.1, 0.01, Table({{2, ParamKind::kWeight}}));
  std::vector<float> w = {3.0f, 4.0f};
  const std::vector<float> g = {0.0f, 0.0f};
  opt->Step(w, g, 0.5);
  EXPECT_EQ(opt->last_local_lr()[0], 1.0);
  // v = 0.5 * (0 + 0.1 w) = 0.05 w -> w = 0.95 w: only weight decay acts.
  EXPECT_NEAR(w[0], 2.85, kTol);
  EXPECT_NEAR(w[1], 3.8, kTol);
}

TEST(Lars, ExcludesBiasesAndBatchNormFromDecayAndTrustRatio) {
  auto opt = Make(OptimizerKind::kLars, 0.9, 0.5, 0.001,
                  Table({{2, ParamKind::kBias},
                         {2, ParamKind::kBnScale},
                         {2, ParamKind::kBnShift}}));
  std::vector<float> w = {3.0f, 4.0f, 1.0f, 1.0f, -1.0f, 2.0f};
  const std::vector<float> g = {0.5f, -1.0f, 0.25f, 0.0f, 2.0f, 1.0f};
  std::vector<float> expected(w);
  const double lr = 0.2;
  // v = lr * g; w -= v: no trust ratio (eta 0.001 would shrink it) and no decay (wd 0.5).
  for (size_t i = 0; i < w.size(); ++i) expected[i] = static_cast<float>(w[i] - lr * g[i]);
  opt->Step(w, g, lr);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], expected[i], kTol) << i;
  for (double local : opt->last_local_lr()) EXPECT_EQ(local, 1.0);
  // Momentum: second step v = 0.9 * lr * g + lr * g.
  opt->Step(w, g, lr);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(w[i], expected[i] - 1.9 * lr * g[i], kTol) << i;
  }
}

TEST(Sgd, DoesNotDecayBiases) {
  auto opt = Make(OptimizerKind::kSgd, 0.0, 1.0, 0.0,
                  Table({{1, ParamKind::kWeight}, {1, ParamKind::kBnScale}}));
  std::vector<float> w = {2.0f, 2.0f};
  const std::vector<float> g = {0.0f, 0.0f};
  opt->Step(w, g, 0.25);
  EXPECT_NEAR(w[0], 1.5, kTol);  // 2 - 0.25 * (0 + 1 * 2)
  EXPECT_EQ(w[1], 2.0f);
}

TEST(Optimizer, RejectsBadOptionsAndUnpackedTables) {
  OptimizerOptions o;
  o.momentum = 1.0;
  auto bad = Optimizer::Create(o, Table({{1, ParamKind::kWeight}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("momentum"), std::string::npos);
  o = OptimizerOptions{};
  o.eta = 0.0;
  EXPECT_FALSE(Optimizer::Create(o, Table({{1, ParamKind::kWeight}})));
  std::vector<ParameterInfo> gap = Table({{2, ParamKind::kWeight}, {2, ParamKind::kBias}});
  gap[1].offset = 3;
  auto unpacked = Optimizer::Create(OptimizerOptions{}, gap);
  ASSERT_FALSE(unpacked);
  EXPECT_NE(unpacked.error().message().find("p1"), std::string::npos);
}

// Prepare's norm pass is the trainer's Inf/NaN check: any non-finite gradient,
// in a LARS-scaled weight or in an excluded bias, in either optimizer, and the
// largest finite floats (whose squares overflow float but not double) are fine.
TEST(Optimizer, PrepareReportsWhetherEveryGradientIsFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  for (OptimizerKind kind : {OptimizerKind::kLars, OptimizerKind::kSgd}) {
    // 5000 weights span two update chunks; then one bias.
    auto opt = Make(kind, 0.9, 0.0, 0.001,
                    Table({{5000, ParamKind::kWeight}, {1, ParamKind::kBias}}));
    const std::vector<float> w(5001, 1.0f);
    std::vector<float> g(5001, big);
    EXPECT_TRUE(opt->Prepare(w, g));
    for (size_t at : {size_t{0}, size_t{4500}, size_t{5000}}) {
      for (float bad : {inf, -inf, nan}) {
        std::vector<float> h(5001, 0.5f);
        h[at] = bad;
        EXPECT_FALSE(opt->Prepare(w, h)) << at << " " << bad;
      }
    }
  }
}

}  // namespace
}  // namespace chorus::trainer
