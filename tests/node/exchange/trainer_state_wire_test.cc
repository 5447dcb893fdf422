// The trainer state's broadcast bytes (node/exchange/trainer_state_wire.h):
// what is written reads back, and a message of another size or a negative
// batch count is refused.
#include "node/exchange/trainer_state_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace chorus::node {
namespace {

TEST(TrainerStateWireTest, BatchNormStateRoundTrips) {
  const std::vector<float> values = {0.5f, -1.0f, 7.0f};
  const std::vector<std::byte> message = EncodeBatchNormState(values, 1234);
  std::vector<float> read(values.size());
  auto tracked = ReadBatchNormState(message, read);
  ASSERT_TRUE(tracked.has_value()) << tracked.error().ToString();
  EXPECT_EQ(*tracked, 1234);
  EXPECT_EQ(read, values);
}

TEST(TrainerStateWireTest, RefusesBadBatchNormStates) {
  std::vector<float> read(2);
  auto other_size = ReadBatchNormState(EncodeBatchNormState(std::vector<float>(3, 1.0f), 1), read);
  ASSERT_FALSE(other_size.has_value());
  EXPECT_NE(other_size.error().message().find("20 bytes"), std::string::npos) << other_size.error().message();
  auto negative = ReadBatchNormState(EncodeBatchNormState(std::vector<float>(2, 1.0f), -3), read);
  ASSERT_FALSE(negative.has_value());
  EXPECT_NE(negative.error().message().find("negative"), std::string::npos) << negative.error().message();
  EXPECT_EQ(read, std::vector<float>(2, 0.0f));  // nothing copied from a refused message
}

TEST(TrainerStateWireTest, LossScalerStateRoundTripsAndRefusesOtherSizes) {
  const trainer::LossScalerState sent{1024.0, 17, 3};
  const auto bytes = EncodeLossScalerState(sent);
  auto state = DecodeLossScalerState(bytes);
  ASSERT_TRUE(state.has_value()) << state.error().ToString();
  EXPECT_EQ(state->scale, sent.scale);
  EXPECT_EQ(state->clean_steps, sent.clean_steps);
  EXPECT_EQ(state->skipped_steps, sent.skipped_steps);
  auto shorter = DecodeLossScalerState(std::span<const std::byte>(bytes).first(kLossScalerStateBytes - 1));
  ASSERT_FALSE(shorter.has_value());
  EXPECT_NE(shorter.error().message().find("23 bytes"), std::string::npos) << shorter.error().message();
}

}  // namespace
}  // namespace chorus::node
