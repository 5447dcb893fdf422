// The blocked mixing loops give, bit for bit, what one element at a time in
// double gives, for every row count the graphs use and lengths that end
// inside a block; their distance estimate matches to rounding.
#include "gossip/protocols/mix_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RandomVector;

struct Case {
  std::vector<float> x, own;
  std::vector<std::vector<float>> rows;
  std::vector<double> weights;
  std::vector<const float*> pointers;
  MixRows Rows() const { return MixRows{pointers.data(), weights.data(), rows.size()}; }
};

Case MakeCase(size_t n, size_t count, uint64_t seed) {
  Case c;
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

TEST(MixBlocks, MixWeightedIsTheElementwiseMix) {
  for (size_t n : kLengths) {
    for (size_t count = 0; count <= 4; ++count) {
      Case c = MakeCase(n, count, 10 * n + count);
      const double self_weight = 0.25;
      std::vector<float> want = c.x;
      double diff2 = 0.0, norm2 = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double xi = c.x[i];
        double acc = self_weight * xi, mean = 0.0;
        for (size_t k = 0; k < count; ++k) {
          acc += c.weights[k] * static_cast<double>(c.rows[k][i]);
          mean += c.rows[k][i];
        }
        if (count > 0) diff2 += (xi - mean / count) * (xi - mean / count);
        norm2 += xi * xi;
        want[i] = static_cast<float>(acc);
      }
      const MixSums sums = MixWeighted(c.x.data(), n, self_weight, c.Rows());
      EXPECT_TRUE(SameBits(c.x, want)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.diff2, diff2, 1e-12 * (1.0 + diff2)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.norm2, norm2, 1e-12 * (1.0 + norm2)) << "n=" << n << " rows=" << count;
    }
  }
}

TEST(MixBlocks, StepTowardsIsTheElementwiseStep) {
  for (size_t n : kLengths) {
    for (size_t count = 0; count <= 4; ++count) {
      Case c = MakeCase(n, count, 20 * n + count);
      const double gamma = 0.6;
      std::vector<float> want = c.x;
      double diff2 = 0.0, norm2 = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double xi = c.x[i];
        double step = 0.0, mean = 0.0;
        for (size_t k = 0; k < count; ++k) {
          const double h = c.rows[k][i];
          step += c.weights[k] * (h - static_cast<double>(c.own[i]));
          mean += h;
        }
        if (count > 0) diff2 += (xi - mean / count) * (xi - mean / count);
        norm2 += xi * xi;
        want[i] = static_cast<float>(xi + gamma * step);
      }
      const MixSums sums = StepTowards(c.x.data(), n, c.own.data(), gamma, c.Rows());
      EXPECT_TRUE(SameBits(c.x, want)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.diff2, diff2, 1e-12 * (1.0 + diff2)) << "n=" << n << " rows=" << count;
      EXPECT_NEAR(sums.norm2, norm2, 1e-12 * (1.0 + norm2)) << "n=" << n << " rows=" << count;
    }
  }
}

}  // namespace
}  // namespace chorus::gossip
