// The blocked mixing loops give, bit for bit, what one element at a time in
// double gives, for every row count the graphs use and lengths that end
// inside a block; their distance estimate matches to rounding.
#include "gossip/protocols/mix_blocks.h"
#include "gossip/protocols/gossip_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RandomVector;

struct MixCase {
  std::vector<float> x, own;
  std::vector<std::vector<float>> rows;
  std::vector<double> weights;
  std::vector<const float*> pointers;
  MixRows Rows() const { return MixRows{pointers.data(), weights.data(), rows.size()}; }
};

MixCase MakeCase(size_t n, size_t count, uint64_t seed) {
  MixCase c;
  c.x = RandomVector(seed, 0, n);
  c.own = RandomVector(seed, 1, n);
  for (size_t k = 0; k < count; ++k) {
    c.rows.push_back(RandomVector(seed, static_cast<int>(2 + k), n));
    c.weights.push_back(1.0 / static_cast<double>(count + 1 + k));
  }
  for (const auto& r : c.rows) c.pointers.push_back(r.data());
  return c;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr size_t kLengths[] = {1, 7, 255, 256, 257, 1000, 4099};

// For every length and row count: `blocked` on a case gives, bit for bit,
// x_i = element(case, i) (in double, rows in order), and the estimate's sums.
template <typename Blocked, typename Element>
void ExpectTheElementwiseLoop(uint64_t seed, Blocked blocked, Element element) {
  for (size_t n : kLengths) {
    for (size_t count = 0; count <= 4; ++count) {
      MixCase c = MakeCase(n, count, seed * n + count);
      std::vector<float> want = c.x;
      double diff2 = 0.0, norm2 = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double xi = c.x[i];
        double mean = 0.0;
        for (size_t k = 0; k < count; ++k) mean += c.rows[k][i];
        if (count > 0) diff2 += (xi - mean / count) * (xi - mean / count);
        norm2 += xi * xi;
        want[i] = static_cast<float>(element(c, i));
      }
      const MixSums sums = blocked(c);
      EXPECT_TRUE(SameBits(c.x, want)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.diff2, diff2, 1e-12 * (1.0 + diff2)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.norm2, norm2, 1e-12 * (1.0 + norm2)) << "n=" << n << " rows=" << count;
    }
  }
}

TEST(MixBlocks, MixWeightedIsTheElementwiseMix) {
  const double self_weight = 0.25;
  ExpectTheElementwiseLoop(
      10, [&](MixCase& c) { return MixWeighted(c.x.data(), c.x.size(), self_weight, c.Rows()); },
      [&](const MixCase& c, size_t i) {
        double acc = self_weight * static_cast<double>(c.x[i]);
        for (size_t k = 0; k < c.rows.size(); ++k) acc += c.weights[k] * static_cast<double>(c.rows[k][i]);
        return acc;
      });
}

TEST(MixBlocks, StepTowardsIsTheElementwiseStep) {
  const double gamma = 0.6;
  ExpectTheElementwiseLoop(
      20, [&](MixCase& c) { return StepTowards(c.x.data(), c.x.size(), c.own.data(), gamma, c.Rows()); },
      [&](const MixCase& c, size_t i) {
        double step = 0.0;
        for (size_t k = 0; k < c.rows.size(); ++k) {
          step += c.weights[k] * (static_cast<double>(c.rows[k][i]) - static_cast<double>(c.own[i]));
        }
        return static_cast<double>(c.x[i]) + gamma * step;
      });
}

// The laned relative distance against one running sum in double, for lengths
// that end inside a lane group.
TEST(RelativeDistanceTest, MatchesTheSumOneElementAtATime) {
  for (size_t n : kLengths) {
    const std::vector<float> a = RandomVector(21, 0, n), b = RandomVector(21, 1, n);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
      diff += d * d;
      norm += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    }
    EXPECT_NEAR(RelativeDistance(a, b), std::sqrt(diff / norm), 1e-12) << n;
    EXPECT_EQ(RelativeDistance(a, a), 0.0) << n;
  }
  const std::vector<float> zeros(9, 0.0f);
  EXPECT_EQ(RelativeDistance(zeros, RandomVector(22, 0, 9)), 0.0);  // no norm: no distance
}

}  // namespace
}  // namespace chorus::gossip
