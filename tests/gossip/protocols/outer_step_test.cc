// The outer step's arithmetic against closed forms, the streaming schedule,
// error feedback and NoLoCo's random groups.
#include "gossip/protocols/outer_step.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "common/split_mix64.h"

namespace chorus::gossip {
namespace {

// A node that takes one gradient step of size eta on f(a) = lambda a^2 / 2
// has parameters x = a - eta lambda a, so the outer gradient is g = eta
// lambda a. Under Nesterov the pair (a, v) then moves by the matrix
//   M = [[1 - lr eta lambda (1 + mu), -lr mu^2], [eta lambda, mu]]
// and after T outer steps it is M^T (a0, 0).
TEST(OuterStepTest, NesterovFollowsItsClosedFormOnAQuadratic) {
  const double lr = 0.7, mu = 0.9, eta = 0.1;
  const std::array<double, 4> lambdas = {0.5, 1.0, 2.0, 4.0};
  OuterStepOptions options{OuterKind::kNesterov, static_cast<float>(lr), static_cast<float>(mu)};
  std::vector<float> anchor = {1.0f, -2.0f, 0.5f, 3.0f}, velocity(4, 0.0f), base(4);
  const std::vector<float> start = anchor;
  const int steps = 30;
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < anchor.size(); ++i) base[i] = anchor[i] - static_cast<float>(eta * lambdas[i]) * anchor[i];
    OuterUpdate(options, base, anchor, velocity);
  }
  for (size_t i = 0; i < anchor.size(); ++i) {
    const double h = eta * lambdas[i];
    const std::array<double, 4> m = {1 - lr * h * (1 + mu), -lr * mu * mu, h, mu};
    std::array<double, 2> state = {start[i], 0.0};
    for (int t = 0; t < steps; ++t) {
      state = {m[0] * state[0] + m[1] * state[1], m[2] * state[0] + m[3] * state[1]};
    }
    EXPECT_NEAR(anchor[i], state[0], 1e-5 * std::abs(start[i])) << "lambda " << lambdas[i];
    EXPECT_NEAR(velocity[i], state[1], 1e-5 * std::abs(start[i])) << "lambda " << lambdas[i];
  }
}

// Heavy ball: v <- mu v + g, a <- a - lr v, step by step in double.
TEST(OuterStepTest, SgdIsTheHeavyBall) {
  OuterStepOptions options{OuterKind::kSgd, 0.5f, 0.8f};
  std::vector<float> anchor = {2.0f, -1.0f}, velocity(2, 0.0f), base(2);
  std::vector<double> a = {2.0, -1.0}, v = {0.0, 0.0};
  for (int t = 0; t < 10; ++t) {
    for (size_t i = 0; i < 2; ++i) base[i] = 0.9f * anchor[i];
    OuterUpdate(options, base, anchor, velocity);
    for (size_t i = 0; i < 2; ++i) {
      const double g = 0.1 * a[i];
      v[i] = 0.8 * v[i] + g;
      a[i] -= 0.5 * v[i];
    }
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(anchor[i], a[i], 1e-5);
}

// Outer lr 1 without momentum, and "average", give the base bit for bit:
// with H = 1 that is synchronous averaging of the parameters.
TEST(OuterStepTest, LearningRateOneWithoutMomentumIsTheBaseBitForBit) {
  SplitMix64 rng(7);
  std::vector<float> anchor(1000), base(1000), velocity(1000, 0.0f);
  for (size_t i = 0; i < anchor.size(); ++i) {
    anchor[i] = static_cast<float>(rng.Symmetric() * 3.0);
    base[i] = static_cast<float>(rng.Symmetric() * 1e-3) + anchor[i];
  }
  for (OuterKind kind : {OuterKind::kNesterov, OuterKind::kSgd, OuterKind::kAverage}) {
    std::vector<float> a = anchor, v = velocity;
    OuterUpdate({kind, 1.0f, 0.0f}, base, a, v);
    EXPECT_EQ(std::memcmp(a.data(), base.data(), a.size() * sizeof(float)), 0) << static_cast<int>(kind);
  }
}

TEST(OuterStepTest, TheUpdateLandsMixedIntoTheParameters) {
  std::vector<float> anchor = {1.0f, 2.0f}, params = {3.0f, 6.0f};
  LandOuterUpdate(0.5f, anchor, params);
  EXPECT_FLOAT_EQ(params[0], 2.0f);
  EXPECT_FLOAT_EQ(params[1], 4.0f);
  LandOuterUpdate(0.0f, anchor, params);
  EXPECT_EQ(params, anchor);
}

// Every parameter belongs to one fragment, and each fragment syncs exactly
// once per period, period / F steps after the one before.
TEST(OuterStepTest, TheFragmentScheduleCoversEveryParameterOncePerPeriod) {
  for (auto [n, fragments, period] : std::vector<std::array<int, 3>>{{10, 1, 5}, {1001, 4, 100}, {7, 7, 7}, {50, 3, 10}}) {
    SCOPED_TRACE(std::to_string(n) + " params, " + std::to_string(fragments) + " fragments, period " +
                 std::to_string(period));
    const std::vector<FragmentRange> ranges = SplitFragments(static_cast<size_t>(n), fragments);
    ASSERT_EQ(ranges.size(), static_cast<size_t>(fragments));
    size_t next = 0;
    for (const FragmentRange& r : ranges) {
      EXPECT_EQ(r.begin, next);
      EXPECT_GE(r.count, static_cast<size_t>(n / fragments));
      next += r.count;
    }
    EXPECT_EQ(next, static_cast<size_t>(n));
    for (int first = 1; first <= 3 * period; first += period) {
      std::vector<int> synced(static_cast<size_t>(fragments), 0);
      int64_t previous = -1;
      for (int64_t s = first; s < first + period; ++s) {
        const int f = FragmentDue(s, fragments, period);
        if (f < 0) continue;
        ++synced[static_cast<size_t>(f)];
        if (previous >= 0) {
          EXPECT_GE(s - previous, period / fragments);
        }
        previous = s;
      }
      for (int f = 0; f < fragments; ++f) EXPECT_EQ(synced[static_cast<size_t>(f)], 1) << "fragment " << f;
    }
    EXPECT_EQ(FragmentDue(period, fragments, period), fragments - 1) << "the last fragment closes the period";
  }
  EXPECT_EQ(FragmentDue(0, 1, 5), -1);
}

// Error feedback: what the codec drops comes back later, so the decoded
// messages plus the residual add up to the deltas, and the residual stays
// bounded (top-k keeps 1% each round) instead of growing with the rounds.
TEST(OuterStepTest, ErrorFeedbackKeepsTheCompressionErrorBounded) {
  CodecOptions o;
  o.kind = CodecKind::kTopK;
  o.ratio = 0.01;
  o.value_bits = 8;
  auto codec = MakeCodec(o);
  ASSERT_TRUE(codec.has_value()) << codec.error().ToString();
  const size_t n = 2000;
  SplitMix64 rng(3);
  std::vector<float> residual(n, 0.0f), decoded(n), delta(n);
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  std::vector<std::byte> wire;
  double max_delta = 0.0, max_residual_first = 0.0, max_residual_last = 0.0;
  const int rounds = 400;
  for (int t = 0; t < rounds; ++t) {
    double delta_norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      delta[i] = static_cast<float>(rng.Symmetric());
      delta_norm += static_cast<double>(delta[i]) * delta[i];
      given[i] += delta[i];
    }
    max_delta = std::max(max_delta, std::sqrt(delta_norm));
    ASSERT_TRUE(EncodeWithFeedback(**codec, delta, static_cast<uint64_t>(t), residual, decoded, &wire).ok());
    EXPECT_EQ(wire.size(), (*codec)->WireBytes(n));
    double residual_norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      sent[i] += decoded[i];
      residual_norm += static_cast<double>(residual[i]) * residual[i];
    }
    residual_norm = std::sqrt(residual_norm);
    (t < rounds / 2 ? max_residual_first : max_residual_last) =
        std::max(t < rounds / 2 ? max_residual_first : max_residual_last, residual_norm);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(sent[i] + residual[i], given[i], 1e-3) << "element " << i;
  // Top-k is a contraction with delta = k / n: ||e|| <= sqrt(1 - delta) / (1 - sqrt(1 - delta)) max ||delta||.
  const double contraction = std::sqrt(1.0 - 0.01);
  EXPECT_LT(max_residual_last, contraction / (1.0 - contraction) * max_delta);
  EXPECT_LT(max_residual_last, 1.5 * max_residual_first) << "the residual levels off";
}

// Every rank lies in exactly one group, every member of a group draws the
// same group, an odd world ends with one group of three, and rounds differ.
TEST(OuterStepTest, RandomGroupsArePairsThatEveryNodeDrawsAlike) {
  for (int world : {2, 3, 4, 7, 16}) {
    std::set<std::vector<int>> pairings;
    for (int64_t round = 0; round < 8; ++round) {
      std::vector<int> seen(static_cast<size_t>(world), 0);
      std::vector<int> triples;
      std::vector<std::vector<int>> groups;
      for (int r = 0; r < world; ++r) {
        const std::vector<int> g = RandomGroup(world, r, 42, round);
        ASSERT_TRUE(std::find(g.begin(), g.end(), r) != g.end());
        ASSERT_TRUE(g.size() == 2 || g.size() == 3) << g.size();
        for (int member : g) {
          EXPECT_EQ(RandomGroup(world, member, 42, round), g);
        }
        if (g.front() == r) {
          groups.push_back(g);
          for (int member : g) ++seen[static_cast<size_t>(member)];
          if (g.size() == 3) triples.push_back(r);
        }
      }
      for (int c : seen) {
        EXPECT_EQ(c, 1);
      }
      EXPECT_EQ(triples.size(), world % 2 == 1 ? 1u : 0u);
      std::vector<int> flat;
      for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
      pairings.insert(flat);
    }
    if (world >= 4) {
      EXPECT_GT(pairings.size(), 1u) << "world " << world << ": the groups change between rounds";
    }
  }
  EXPECT_EQ(RandomGroup(1, 0, 1, 0), std::vector<int>{0});
}

}  // namespace
}  // namespace chorus::gossip
