// ProviderCallClock: a call is timed from the first check that sees it, to
// within one check; a call that ended, even if another began, starts again.
#include "gossip/transport/fabric/provider_call_clock.h"

#include <gtest/gtest.h>

namespace chorus::gossip::fabric {
namespace {

using std::chrono::milliseconds;

TEST(ProviderCallClockTest, TimesTheRunningCallFromTheCheckThatFirstSawIt) {
  ProviderCallClock clock;
  const auto t0 = ProviderCallClock::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_FALSE(clock.Check(t0));
  {
    ProviderCallScope call(clock, 7);
    auto first = clock.Check(t0);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->elapsed, ProviderCallClock::Clock::duration::zero());
    EXPECT_EQ(first->peer, 7u);
    auto later = clock.Check(t0 + milliseconds(750));
    ASSERT_TRUE(later);
    EXPECT_EQ(later->elapsed, milliseconds(750));
  }
  EXPECT_FALSE(clock.Check(t0 + milliseconds(1000)));
  // Calls that end between checks never add up.
  for (int i = 0; i < 3; ++i) {
    ProviderCallScope call(clock, ProviderCallClock::kNoPeer);
    auto seen = clock.Check(t0 + milliseconds(1250 + 250 * i));
    ASSERT_TRUE(seen);
    EXPECT_EQ(seen->elapsed, ProviderCallClock::Clock::duration::zero()) << i;
    EXPECT_EQ(seen->peer, ProviderCallClock::kNoPeer);
  }
}

}  // namespace
}  // namespace chorus::gossip::fabric
