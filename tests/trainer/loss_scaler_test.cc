// Tests of the dynamic loss scaler state machine: skip and back off on
// overflow, grow after growth_interval clean steps, bounds, disabled mode.
#include "trainer/loss_scaler.h"

#include <gtest/gtest.h>

namespace chorus::trainer {
namespace {

LossScalerOptions SmallOptions() {
  LossScalerOptions o;
  o.initial_scale = 1024.0;
  o.growth_interval = 3;
  o.growth_factor = 2.0;
  o.backoff_factor = 0.5;
  o.min_scale = 256.0;
  o.max_scale = 4096.0;
  return o;
}

// All scales here are powers of two times exact factors, so == comparisons are exact.
TEST(LossScaler, OverflowSkipsStepAndBacksOff) {
  LossScaler scaler(SmallOptions());
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 256.0) << "backoff must stop at min_scale";
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanSteps) {
  LossScaler scaler(SmallOptions());
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.clean_steps(), 2);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 2048.0);
  EXPECT_EQ(scaler.clean_steps(), 0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 4096.0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 4096.0) << "growth must stop at max_scale";
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, OverflowRestartsTheCleanCount) {
  LossScaler scaler(SmallOptions());
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.clean_steps(), 0);
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 512.0) << "only 2 clean steps since the overflow";
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1024.0);
}

TEST(LossScaler, DisabledKeepsScaleOneButStillSkipsNonFinite) {
  LossScalerOptions o = SmallOptions();
  o.enabled = false;
  LossScaler scaler(o);
  EXPECT_EQ(scaler.scale(), 1.0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(LossScaler, ValidateNamesTheBadField) {
  EXPECT_TRUE(ValidateLossScalerOptions(LossScalerOptions{}).ok());
  LossScalerOptions o;
  o.growth_factor = 1.0;
  Status s = ValidateLossScalerOptions(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("growth_factor"), std::string::npos) << s.ToString();
  o = LossScalerOptions{};
  o.backoff_factor = 1.0;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("backoff_factor"), std::string::npos);
  o = LossScalerOptions{};
  o.growth_interval = 0;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("growth_interval"), std::string::npos);
  o = LossScalerOptions{};
  o.initial_scale = 0.5;  // below min_scale 1
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("initial_scale"), std::string::npos);
}

TEST(LossScaler, RestoreContinuesFromSavedState) {
  LossScaler a(SmallOptions());
  a.Update(true);
  a.Update(false);
  a.Update(true);
  a.Update(true);
  LossScaler b(SmallOptions());
  ASSERT_TRUE(b.Restore(a.state()).ok());
  // One more clean step reaches growth_interval on both.
  EXPECT_EQ(a.Update(true), b.Update(true));
  EXPECT_EQ(a.scale(), b.scale());
  EXPECT_EQ(a.scale(), 1024.0);
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_FALSE(b.Restore(LossScalerState{-1.0, 0, 0}).ok());
  EXPECT_FALSE(b.Restore(LossScalerState{2.0, -1, 0}).ok());
}

}  // namespace
}  // namespace chorus::trainer
