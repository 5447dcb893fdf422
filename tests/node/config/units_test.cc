// Tests of node/units: bandwidths and durations with units, and the errors for
// text without a unit, with an unknown unit, or out of range.
#include "node/config/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

// Relative tolerance: the factors are exact decimal scalings of a parsed
// double, so only the last bits of a product can differ.
constexpr double kRel = 1e-12;

TEST(UnitsTest, BandwidthInBitsPerSecond) {
  EXPECT_NEAR(*ParseBandwidth("10gbit"), 1.25e9, 1.25e9 * kRel);
  EXPECT_NEAR(*ParseBandwidth("1gbit"), 1.25e8, 1.25e8 * kRel);
  EXPECT_NEAR(*ParseBandwidth("100mbit"), 1.25e7, 1.25e7 * kRel);
  EXPECT_NEAR(*ParseBandwidth("8kbit"), 1000.0, 1000.0 * kRel);
  EXPECT_NEAR(*ParseBandwidth("8bit"), 1.0, kRel);
  EXPECT_NEAR(*ParseBandwidth("2.5Gbit/s"), 3.125e8, 3.125e8 * kRel);
  EXPECT_NEAR(*ParseBandwidth(" 1 GBIT "), 1.25e8, 1.25e8 * kRel);
  EXPECT_NEAR(*ParseBandwidth("8mibit"), 1048576.0, 1048576.0 * kRel);
}

TEST(UnitsTest, BandwidthInBytesPerSecondAsTc) {
  EXPECT_NEAR(*ParseBandwidth("125mbps"), 1.25e8, 1.25e8 * kRel);
  EXPECT_NEAR(*ParseBandwidth("1gbps"), 1e9, 1e9 * kRel);
  EXPECT_NEAR(*ParseBandwidth("300bps"), 300.0, 300.0 * kRel);
}

TEST(UnitsTest, BandwidthErrorsNameTheText) {
  auto bare = ParseBandwidth("100");
  ASSERT_FALSE(bare.has_value());
  EXPECT_THAT(bare.error().message(), HasSubstr("\"100\" has no unit"));
  auto unknown = ParseBandwidth("10gb");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error().message(), HasSubstr("unknown unit \"gb\""));
  EXPECT_THAT(unknown.error().message(), HasSubstr("gbit"));
  auto zero = ParseBandwidth("0gbit");
  ASSERT_FALSE(zero.has_value());
  EXPECT_THAT(zero.error().message(), HasSubstr("must be positive"));
  auto word = ParseBandwidth("fast");
  ASSERT_FALSE(word.has_value());
  EXPECT_THAT(word.error().message(), HasSubstr("does not start with a number"));
  EXPECT_FALSE(ParseBandwidth("").has_value());
  EXPECT_FALSE(ParseBandwidth("-1gbit").has_value());
}

TEST(UnitsTest, Durations) {
  EXPECT_NEAR(*ParseDuration("50us"), 5e-5, 5e-5 * kRel);
  EXPECT_NEAR(*ParseDuration("50\xc2\xb5s"), 5e-5, 5e-5 * kRel);
  EXPECT_NEAR(*ParseDuration("1ms"), 1e-3, 1e-3 * kRel);
  EXPECT_NEAR(*ParseDuration("2.5s"), 2.5, 2.5 * kRel);
  EXPECT_NEAR(*ParseDuration("100ns"), 1e-7, 1e-7 * kRel);
  EXPECT_NEAR(*ParseDuration("1MS"), 1e-3, 1e-3 * kRel);
  EXPECT_EQ(*ParseDuration("0"), 0.0);
  EXPECT_EQ(*ParseDuration("0us"), 0.0);
}

TEST(UnitsTest, DurationErrorsNameTheText) {
  auto bare = ParseDuration("50");
  ASSERT_FALSE(bare.has_value());
  EXPECT_THAT(bare.error().message(), HasSubstr("\"50\" has no unit"));
  auto unknown = ParseDuration("3h");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error().message(), HasSubstr("unknown unit \"h\""));
  auto negative = ParseDuration("-1ms");
  ASSERT_FALSE(negative.has_value());
  EXPECT_THAT(negative.error().message(), HasSubstr("must not be negative"));
}

}  // namespace
}  // namespace chorus::node
