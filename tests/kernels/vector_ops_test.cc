// Vector ops in closed form: SumSquares accumulates in double (float
// accumulation would visibly drift), AllFinite finds a single Inf or NaN
// anywhere (including the last element of a large array), Axpy and Scale.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

TEST(VectorOps, SumSquaresAddsInDouble) {
  const Context ctx;
  // sum_{i=1..N} i^2 = N (N + 1) (2N + 1) / 6; every i is exact in float and
  // every i^2 in double, so only the additions round: at most N * eps(double)
  // relative (~1e-10). Float accumulation would be off by ~1e-4 relative.
  const size_t count = 1000003;
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(i + 1);
  const double n = static_cast<double>(count);
  const double want = n * (n + 1) * (2 * n + 1) / 6;
  EXPECT_NEAR(SumSquares<float>(ctx, count, x.data()), want,
              n * std::numeric_limits<double>::epsilon() * want);
  EXPECT_EQ(SumSquares<float>(ctx, 0, x.data()), 0.0);
}

TEST(VectorOps, SumSquaresMultipliesInDouble) {
  const Context ctx;
  // v = 1 + 2^-12 is exact in float; v^2 = 1 + 2^-11 + 2^-24 needs 25 bits, so
  // a float product would drop the 2^-24. Every partial sum k * v^2 (k <= 2^20)
  // needs at most 45 bits: in double the result is exact, in any order.
  const size_t count = size_t{1} << 20;
  const float v = 1.0f + std::ldexp(1.0f, -12);
  const std::vector<float> x(count, v);
  const double square = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -24);
  EXPECT_EQ(SumSquares<float>(ctx, count, x.data()), static_cast<double>(count) * square);
}

TEST(VectorOps, SumSquaresWithinIsOneThreadsSumAndFindsValuesOverTheLimit) {
  // Below SumSquares' threading size, so both run one block in one order.
  for (size_t count : {size_t{0}, size_t{31}, size_t{32}, size_t{1000}, size_t{20001}}) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
    bool within = false;
    EXPECT_EQ(SumSquaresWithin(count, x.data(), 3.0, &within), SumSquares<float>(Context{}, count, x.data()))
        << count;
    EXPECT_TRUE(within) << count;
    if (count == 0) continue;
    for (size_t pos : {size_t{0}, count / 2, count - 1}) {
      for (float bad : {3.5f, -3.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        const float kept = x[pos];
        x[pos] = bad;
        SumSquaresWithin(count, x.data(), 3.0, &within);
        EXPECT_FALSE(within) << count << " " << pos << " " << bad;
        x[pos] = kept;
      }
    }
    // Inf is above the largest float, and the limit itself is within.
    x[count - 1] = std::numeric_limits<float>::max();
    SumSquaresWithin(count, x.data(), std::numeric_limits<float>::max(), &within);
    EXPECT_TRUE(within) << count;
    x[count - 1] = std::numeric_limits<float>::infinity();
    SumSquaresWithin(count, x.data(), std::numeric_limits<float>::max(), &within);
    EXPECT_FALSE(within) << count;
  }
}

TEST(VectorOps, AllFiniteFindsInfAndNan) {
  const Context ctx;
  for (size_t count : {size_t{5}, size_t{100003}}) {
    std::vector<float> x(count, 1.5f);
    EXPECT_TRUE(AllFinite<float>(ctx, count, x.data()));
    for (size_t pos : {size_t{0}, count / 2, count - 1}) {
      for (float bad :
           {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::quiet_NaN()}) {
        x[pos] = bad;
        EXPECT_FALSE(AllFinite<float>(ctx, count, x.data())) << count << " " << pos;
        x[pos] = 1.5f;
      }
    }
    // The largest finite value is finite.
    x[count - 1] = std::numeric_limits<float>::max();
    EXPECT_TRUE(AllFinite<float>(ctx, count, x.data()));
  }
  std::vector<double> d = {1.0, std::numeric_limits<double>::infinity()};
  EXPECT_FALSE(AllFinite<double>(ctx, d.size(), d.data()));
  EXPECT_TRUE(AllFinite<double>(ctx, 1, d.data()));
}

TEST(VectorOps, AxpyAndScale) {
  const Context ctx;
  const size_t count = 70001;  // above the parallel threshold, odd length
  std::vector<float> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = static_cast<float>(i % 13);
    y[i] = static_cast<float>(i % 5);
  }
  Axpy<float>(ctx, count, 0.5f, x.data(), y.data());
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(y[i], static_cast<float>(i % 5) + 0.5f * (i % 13)) << i;
  Scale<float>(ctx, count, -2.0f, y.data());
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(y[i], -2.0f * (static_cast<float>(i % 5) + 0.5f * (i % 13))) << i;
}

}  // namespace
}  // namespace chorus::kernels
