// Tests of the gossip step's corrections on hand-computed vectors: quasi-global
// momentum's buffer (LARS form and SGD form, whose lr is read off the move) and
// D^2's mixed point.
#include "node/exchange/gossip_corrections.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus::node {
namespace {

constexpr double kTol = 1e-6;

// LARS keeps lr in its buffer (w -= v): vhat_t = mu vhat + (1 - mu) (x_t - x_{t+1}).
TEST(GossipCorrectionsTest, QuasiGlobalMomentumIsTheMixedMoveAveraged) {
  GossipCorrections c({.quasi_global_momentum = true, .momentum = 0.9, .momentum_holds_lr = true});
  std::vector<float> master = {1.0f, 2.0f};
  std::vector<float> momentum = {0.5f, -0.5f};
  c.BeforeUpdate(7, master, momentum);
  // The optimizer's step and the mixing move the master; the buffer is the optimizer's v_t.
  master = {0.4f, 2.6f};
  momentum = {0.6f, -0.6f};
  c.BeforeMix(7, master, momentum);
  master = {0.3f, 2.5f};  // after mixing with the neighbours
  c.AfterMix(7, master, momentum);
  // 0.9 [0.5, -0.5] + 0.1 ([1, 2] - [0.3, 2.5])
  EXPECT_NEAR(momentum[0], 0.52, kTol);
  EXPECT_NEAR(momentum[1], -0.5, kTol);
  EXPECT_DOUBLE_EQ(c.last_scale(), 1.0);

  // A step whose snapshot is another step's runs uncorrected.
  std::vector<float> untouched = momentum;
  c.BeforeMix(8, master, momentum);
  c.AfterMix(8, master, momentum);
  EXPECT_EQ(momentum, untouched);
}

// SGD (w -= lr v): lr = <x_t - x_half, v_t> / <v_t, v_t> = 0.1, and
// vhat_t = mu vhat + (1 - mu) (x_t - x_{t+1}) / lr.
TEST(GossipCorrectionsTest, QuasiGlobalMomentumReadsSgdsLrOffTheMove) {
  GossipCorrections c({.quasi_global_momentum = true, .momentum = 0.9, .momentum_holds_lr = false});
  std::vector<float> master = {1.0f, 2.0f};
  std::vector<float> momentum = {0.5f, -0.5f};
  c.BeforeUpdate(0, master, momentum);
  momentum = {2.0f, 4.0f};  // v_t
  master = {0.8f, 1.6f};    // x_t - 0.1 v_t
  c.BeforeMix(0, master, momentum);
  master = {0.7f, 1.5f};
  c.AfterMix(0, master, momentum);
  EXPECT_NEAR(c.last_scale(), 0.1, 1e-7);
  // 0.9 [0.5, -0.5] + 0.1 [0.3, 0.5] / 0.1
  EXPECT_NEAR(momentum[0], 0.75, 1e-5);
  EXPECT_NEAR(momentum[1], 0.05, 1e-5);
}

// D^2: x_{t+1/2} = x_t + o_t - o_{t-1}; the first step, and a step after a
// gap, mix the optimizer's output as D-PSGD does.
TEST(GossipCorrectionsTest, D2MixesTheCorrectedPoint) {
  GossipCorrections c({.d2 = true});
  std::vector<float> none;
  std::vector<float> master = {1.0f, 1.0f};
  c.BeforeUpdate(0, master, none);
  master = {0.5f, 0.5f};  // o_0
  c.BeforeMix(0, master, none);
  EXPECT_EQ(master, (std::vector<float>{0.5f, 0.5f}));
  master = {0.6f, 0.4f};  // x_1 after mixing
  c.BeforeUpdate(1, master, none);
  master = {0.2f, 0.3f};  // o_1
  c.BeforeMix(1, master, none);
  EXPECT_NEAR(master[0], 0.6 + 0.2 - 0.5, kTol);
  EXPECT_NEAR(master[1], 0.4 + 0.3 - 0.5, kTol);
  // Step 3 follows step 1 (step 2 ran without the exchange): plain again.
  master = {0.1f, 0.1f};
  c.BeforeUpdate(3, master, none);
  master = {0.0f, 0.05f};
  c.BeforeMix(3, master, none);
  EXPECT_EQ(master, (std::vector<float>{0.0f, 0.05f}));
  // After a reset too.
  c.Reset();
  master = {0.1f, 0.1f};
  c.BeforeUpdate(4, master, none);
  master = {0.0f, 0.0f};
  c.BeforeMix(4, master, none);
  EXPECT_EQ(master, (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace chorus::node
