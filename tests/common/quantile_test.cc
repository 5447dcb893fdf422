#include "common/quantile.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus {
namespace {

TEST(QuantileTest, NearestRankOfUnsortedSamples) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, descending
  EXPECT_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_EQ(Quantile(v, 0.5), 51.0);   // index 50 of the sorted samples
  EXPECT_EQ(Quantile(v, 0.99), 100.0); // index 99
  EXPECT_EQ(Quantile(v, 1.0), 100.0);  // clamped to the last
}

TEST(QuantileTest, MedianOfOddAndEvenCounts) {
  std::vector<double> odd = {3, 1, 2};
  EXPECT_EQ(Quantile(odd, 0.5), 2.0);
  std::vector<double> even = {4, 1, 3, 2};
  EXPECT_EQ(Quantile(even, 0.5), 3.0);  // the upper median
}

TEST(QuantileTest, EmptyIsZero) {
  std::vector<double> none;
  EXPECT_EQ(Quantile(none, 0.5), 0.0);
}

}  // namespace
}  // namespace chorus
