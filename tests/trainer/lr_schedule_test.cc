// Tests of the learning-rate schedule: linear scaling, linear warm-up and
// polynomial decay values at chosen steps.
#include "trainer/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace chorus::trainer {
namespace {

// The schedule is a few double operations; 1e-12 relative covers their rounding.
constexpr double kRel = 1e-12;

LrScheduleOptions Options() {
  LrScheduleOptions o;
  o.base_lr = 0.1;
  o.global_batch = 512;  // peak = 0.1 * 512 / 256 = 0.2
  o.warmup_epochs = 1.0;
  o.power = 2.0;
  return o;
}

TEST(LrSchedule, ScalesLinearlyWithGlobalBatch) {
  EXPECT_NEAR(PeakLearningRate(Options()), 0.2, 0.2 * kRel);
  LrScheduleOptions o = Options();
  o.global_batch = 64;
  EXPECT_NEAR(PeakLearningRate(o), 0.025, 0.025 * kRel);
}

TEST(LrSchedule, WarmupRisesLinearlyFromNearZeroToPeak) {
  const LrScheduleOptions o = Options();
  // 10 steps per epoch, 5 epochs: W = 10, T = 50.
  EXPECT_NEAR(LearningRate(0, 10, 5, o), 0.02, kRel);
  EXPECT_NEAR(LearningRate(4, 10, 5, o), 0.1, kRel);
  EXPECT_NEAR(LearningRate(9, 10, 5, o), 0.2, kRel);
  for (int s = 1; s < 10; ++s) EXPECT_GT(LearningRate(s, 10, 5, o), LearningRate(s - 1, 10, 5, o));
}

TEST(LrSchedule, DecaysPolynomiallyToZero) {
  const LrScheduleOptions o = Options();
  EXPECT_NEAR(LearningRate(10, 10, 5, o), 0.2, kRel);         // progress 0
  EXPECT_NEAR(LearningRate(30, 10, 5, o), 0.2 * 0.25, kRel);  // progress 0.5, power 2
  EXPECT_NEAR(LearningRate(49, 10, 5, o), 0.2 / 1600.0, kRel);  // (1/40)^2
  EXPECT_EQ(LearningRate(50, 10, 5, o), 0.0);
  EXPECT_EQ(LearningRate(1000, 10, 5, o), 0.0);
  for (int s = 11; s < 50; ++s) EXPECT_LT(LearningRate(s, 10, 5, o), LearningRate(s - 1, 10, 5, o));
  LrScheduleOptions linear = o;
  linear.power = 1.0;
  EXPECT_NEAR(LearningRate(30, 10, 5, linear), 0.1, kRel);
}

TEST(LrSchedule, WithoutWarmupStartsAtPeak) {
  LrScheduleOptions o = Options();
  o.warmup_epochs = 0.0;
  EXPECT_NEAR(LearningRate(0, 10, 5, o), 0.2, kRel);
  EXPECT_NEAR(LearningRate(25, 10, 5, o), 0.2 * 0.25, kRel);
}

TEST(LrSchedule, FractionalWarmupRoundsToSteps) {
  LrScheduleOptions o = Options();
  o.warmup_epochs = 0.25;  // 2.5 steps -> llround -> 3
  EXPECT_NEAR(LearningRate(0, 10, 5, o), 0.2 / 3.0, kRel);
  EXPECT_NEAR(LearningRate(2, 10, 5, o), 0.2, kRel);
}

// A position between steps (an epoch of a changed membership mapped onto the
// schedule's steps) lies between its neighbours' rates, on the same curve.
TEST(LrSchedule, PositionsBetweenStepsFollowTheCurve) {
  LrScheduleOptions o = Options();
  EXPECT_NEAR(LearningRate(4.5, 10, 5, o), 0.2 * 5.5 / 10.0, kRel);  // warm-up: (step + 1) / W
  const double before = LearningRate(25.0, 10, 5, o);
  const double between = LearningRate(25.5, 10, 5, o);
  const double after = LearningRate(26.0, 10, 5, o);
  EXPECT_LT(between, before);
  EXPECT_GT(between, after);
  EXPECT_NEAR(between, 0.2 * std::pow(1.0 - 15.5 / 40.0, 2.0), kRel);
  EXPECT_EQ(LearningRate(49.9, 10, 5, o) > 0.0, true);
  EXPECT_EQ(LearningRate(50.0, 10, 5, o), 0.0);
}

TEST(LrSchedule, WarmupLongerThanTheRunIsAllWarmup) {
  LrScheduleOptions o = Options();
  o.warmup_epochs = 10.0;
  EXPECT_NEAR(LearningRate(0, 10, 2, o), 0.2 / 20.0, kRel);
  EXPECT_NEAR(LearningRate(19, 10, 2, o), 0.2, kRel);
  EXPECT_EQ(LearningRate(20, 10, 2, o), 0.0);
}

TEST(LrSchedule, ValidateNamesTheBadField) {
  EXPECT_TRUE(ValidateLrScheduleOptions(Options()).ok());
  LrScheduleOptions o = Options();
  o.global_batch = 0;
  EXPECT_NE(ValidateLrScheduleOptions(o).message().find("global_batch"), std::string::npos);
  o = Options();
  o.warmup_epochs = -1;
  EXPECT_NE(ValidateLrScheduleOptions(o).message().find("warmup_epochs"), std::string::npos);
  o = Options();
  o.base_lr = -0.1;
  EXPECT_NE(ValidateLrScheduleOptions(o).message().find("base_lr"), std::string::npos);
}

}  // namespace
}  // namespace chorus::trainer
