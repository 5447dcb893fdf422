// Tests for the spectral gap: the Jacobi solver on known spectra, closed forms for
// complete graphs, rings, hypercubes and tori, power iteration against closed forms
// and against Jacobi, and simulated consensus contracting at the predicted rate.
#include "topologies/spectral_gap.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <gtest/gtest.h>

#include "topologies/graph_builders.h"
#include "topologies/mixing_weights.h"
#include "common/split_mix64.h"

namespace chorus::topologies {
namespace {

// Jacobi stops when the off-diagonal norm is below 1e-15 ||W|| and rounding adds about
// n * 2^-52 * ||W|| per eigenvalue; ||W|| <= sqrt(n) for a stochastic matrix, so with
// n <= 64 every eigenvalue is within about 1e-13 of the exact one.
constexpr double kJacobiTolerance = 1e-12;

std::vector<double> RandomVector(int n, SplitMix64& rng) {
  std::vector<double> x(n);
  for (double& v : x) v = rng.Symmetric();
  return x;
}

double DistanceToMean(const std::vector<double>& x, double mean) {
  double sum = 0.0;
  for (double v : x) sum += (v - mean) * (v - mean);
  return std::sqrt(sum);
}

std::vector<double> Apply(const std::vector<double>& w, const std::vector<double>& x) {
  const int n = static_cast<int>(x.size());
  std::vector<double> y(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) y[i] += w[i * n + j] * x[j];
  }
  return y;
}

TEST(SpectralGap, JacobiRecoversAKnownSpectrum) {
  // A = H D H with H = I - 2 v v^T / (v^T v), an orthogonal reflection, has eigenvalues D.
  const std::vector<double> d = {-3.0, -1.0, 0.0, 0.0, 0.5, 2.0, 2.0, 7.0, 1e-3};
  const int n = static_cast<int>(d.size());
  SplitMix64 rng(7);
  const std::vector<double> v = RandomVector(n, rng);
  double vv = 0.0;
  for (double x : v) vv += x * x;
  std::vector<double> h(n * n), a(n * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) h[i * n + j] = (i == j ? 1.0 : 0.0) - 2.0 * v[i] * v[j] / vv;
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < n; ++k) a[i * n + j] += h[i * n + k] * d[k] * h[k * n + j];
    }
  }
  for (int i = 0; i < n; ++i) {  // exact symmetry; the products above may differ in the last bit
    for (int j = i + 1; j < n; ++j) a[j * n + i] = a[i * n + j];
  }
  auto eigenvalues = SymmetricEigenvalues(a, n);
  ASSERT_TRUE(eigenvalues) << eigenvalues.error().ToString();
  std::vector<double> expected = d;
  std::sort(expected.begin(), expected.end());
  for (int i = 0; i < n; ++i) {
    // ||A|| = 7; forming A and the rotations each cost about n * 2^-52 * 7 ~ 1e-14.
    EXPECT_NEAR((*eigenvalues)[i], expected[i], 1e-12) << i;
  }
}

TEST(SpectralGap, JacobiRejectsBadInput) {
  EXPECT_FALSE(SymmetricEigenvalues({1.0, 2.0, 3.0}, 2));
  EXPECT_FALSE(SymmetricEigenvalues({1.0, 2.0, 0.0, 1.0}, 2));
  EXPECT_FALSE(SymmetricSpectralGap({0.5, 0.25, 0.25, 0.5}, 2));  // rows sum to 0.75
  EXPECT_FALSE(SymmetricSpectralGap({}, 0));
}

TEST(SpectralGap, CompleteGraphMixesInOneRound) {
  // Metropolis-Hastings on the complete graph is W = (1/n) 1 1^T: eigenvalues 1 and
  // n - 1 zeros. The computed zeros are rounding residues (1/n is inexact in binary),
  // about n * 2^-52, hence the 1e-12 tolerance.
  for (int n : {1, 2, 3, 5, 8, 12, 16, 33}) {
    auto gap = GraphSpectralGap(*CompleteGraph(n));
    ASSERT_TRUE(gap) << gap.error().ToString();
    EXPECT_TRUE(gap->exact);
    EXPECT_NEAR(gap->gap_per_round, 1.0, kJacobiTolerance) << "n = " << n;
  }
}

TEST(SpectralGap, BidirectionalRingMatchesClosedForm) {
  // Degree 2 everywhere: W = (I + S + S^T) / 3, eigenvalues (1 + 2 cos(2 pi k / n)) / 3;
  // the largest magnitude after 1 is k = 1 for n >= 3.
  for (int n : {3, 4, 5, 8, 12, 16, 31, 64}) {
    auto gap = GraphSpectralGap(*BidirectionalRingGraph(n));
    ASSERT_TRUE(gap) << gap.error().ToString();
    const double expected = 1.0 - (1.0 + 2.0 * std::cos(2.0 * std::numbers::pi / n)) / 3.0;
    EXPECT_NEAR(gap->gap_per_round, expected, kJacobiTolerance) << "n = " << n;
  }
}

TEST(SpectralGap, HypercubeMatchesClosedForm) {
  // Degree k = log2 n: W = (I + A) / (k + 1) with adjacency eigenvalues k - 2j, so
  // |lambda_2| = (k - 1) / (k + 1) and the gap is 2 / (k + 1).
  for (int k = 1; k <= 6; ++k) {
    auto gap = GraphSpectralGap(*HypercubeGraph(1 << k));
    ASSERT_TRUE(gap);
    EXPECT_NEAR(gap->gap_per_round, 2.0 / (k + 1), kJacobiTolerance) << "k = " << k;
  }
}

TEST(SpectralGap, TorusMatchesClosedForm) {
  // 4 x 6 torus, degree 4: W = (I + A) / 5 with eigenvalues
  // (1 + 2 cos(2 pi a / 4) + 2 cos(2 pi b / 6)) / 5 over all (a, b).
  double second = 0.0;
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 6; ++b) {
      if (a == 0 && b == 0) continue;
      const double lambda = (1.0 + 2.0 * std::cos(2.0 * std::numbers::pi * a / 4) +
                             2.0 * std::cos(2.0 * std::numbers::pi * b / 6)) / 5.0;
      second = std::max(second, std::abs(lambda));
    }
  }
  auto gap = GraphSpectralGap(*TorusGraph(24, {4, 6}));
  ASSERT_TRUE(gap);
  EXPECT_NEAR(gap->gap_per_round, 1.0 - second, kJacobiTolerance);
}

TEST(SpectralGap, DirectedRingPushSumMatchesClosedForm) {
  // Push-sum on the directed ring is (I + S) / 2 with eigenvalues (1 + e^{2 pi i k / n}) / 2,
  // of modulus |cos(pi k / n)|: |lambda_2| = cos(pi / n). The power iteration stops when
  // two windows agree to 1e-6 relative; 1e-5 leaves room for the last window's error.
  for (int n : {3, 5, 8, 12, 16}) {
    auto gap = GraphSpectralGap(*RingGraph(n));
    ASSERT_TRUE(gap) << gap.error().ToString();
    EXPECT_FALSE(gap->exact);
    EXPECT_TRUE(gap->converged);
    EXPECT_EQ(gap->period, 1);
    EXPECT_NEAR(gap->rate_per_period, std::cos(std::numbers::pi / n), 1e-5) << "n = " << n;
  }
}

TEST(SpectralGap, OnePeerExponentialAveragesExactlyForPowersOfTwo) {
  // Over one period the push-sum product is prod_k (I + S^(2^k)) / 2 = (1/n) sum_m S^m, the
  // averaging matrix: rate 0 (up to rounding), gap 1 per round.
  for (int n : {2, 4, 8, 16, 64}) {
    auto gap = GraphSpectralGap(*OnePeerExponentialGraph(n));
    ASSERT_TRUE(gap) << gap.error().ToString();
    EXPECT_EQ(gap->rate_per_period, 0.0) << "n = " << n;
    EXPECT_EQ(gap->gap_per_round, 1.0);
    EXPECT_TRUE(gap->converged);
  }
  // Not a power of two: some mass is left after a period.
  auto twelve = GraphSpectralGap(*OnePeerExponentialGraph(12));
  ASSERT_TRUE(twelve);
  EXPECT_EQ(twelve->period, 4);
  EXPECT_GT(twelve->rate_per_period, 0.01);
  EXPECT_LT(twelve->rate_per_period, 1.0);
}

TEST(SpectralGap, PowerIterationAgreesWithJacobiOnSymmetricMatrices) {
  // A symmetric doubly stochastic W is also column stochastic, so both methods apply.
  std::vector<Graph> graphs = {*BidirectionalRingGraph(9), *HypercubeGraph(16),
                               *RandomRegularGraph(64, 3, 11), *TorusGraph(12, {3, 4})};
  for (const Graph& g : graphs) {
    const std::vector<double> w = *MetropolisHastingsMatrix(g);
    auto exact = SymmetricSpectralGap(w, g.NumNodes());
    auto estimate = EstimateProductSpectralGap({w}, g.NumNodes());
    ASSERT_TRUE(exact && estimate);
    EXPECT_TRUE(estimate->converged) << g.Name();
    // Stopping rule 1e-6 relative between windows; 1e-4 covers a slow second mode.
    EXPECT_NEAR(estimate->gap_per_round, *exact, 1e-4) << g.Name();
  }
}

TEST(SpectralGap, JacobiHandlesTwoHundredFiftySixNodes) {
  const Graph g = *RandomRegularGraph(256, 4, 3);
  const std::vector<double> w = *MetropolisHastingsMatrix(g);
  auto exact = SymmetricSpectralGap(w, 256);
  ASSERT_TRUE(exact) << exact.error().ToString();
  auto estimate = EstimateProductSpectralGap({w}, 256);
  ASSERT_TRUE(estimate);
  EXPECT_GT(*exact, 0.0);
  EXPECT_NEAR(estimate->gap_per_round, *exact, 1e-4);  // as in the test above
}

TEST(SpectralGap, SymmetricConsensusContractsAtThePredictedRate) {
  std::vector<Graph> graphs = {*BidirectionalRingGraph(16), *TorusGraph(16, {4, 4}),
                               *HypercubeGraph(16), *RandomRegularGraph(32, 3, 5)};
  SplitMix64 rng(21);
  for (const Graph& g : graphs) {
    const int n = g.NumNodes();
    const std::vector<double> w = *MetropolisHastingsMatrix(g);
    const double gap = *SymmetricSpectralGap(w, n);
    const double rate = 1.0 - gap;
    // Rounds until the distance falls to 1e-6 of the start. Rounding adds about
    // rounds * n * 2^-52 ~ 1e-12 of absolute noise per entry, 1e-6 of the final distance
    // at most, which moves the measured rate by under 1e-7 relative.
    const int rounds = static_cast<int>(*ExpectedConsensusRounds(gap, 1e-6));
    std::vector<double> x = RandomVector(n, rng);
    double mean = 0.0;
    for (double v : x) mean += v / n;
    const double start = DistanceToMean(x, mean);
    std::vector<double> distance = {start};
    for (int k = 1; k <= rounds; ++k) {
      x = Apply(w, x);
      distance.push_back(DistanceToMean(x, mean));
      // For symmetric W the gap is a hard bound; 1e-12 of slack absorbs rounding.
      EXPECT_LE(distance[k], std::pow(rate, k) * start * (1.0 + 1e-9) + 1e-12)
          << g.Name() << " round " << k;
    }
    EXPECT_LE(distance[rounds], 1e-6 * start * (1.0 + 1e-9) + 1e-12);
    // Measured rate over the second half: the faster modes have died out, so it is at
    // most the predicted one and, for these graphs, within 5% of it.
    const int half = rounds / 2;
    const double measured = std::pow(distance[rounds] / distance[half], 1.0 / (rounds - half));
    EXPECT_LE(measured, rate * (1.0 + 1e-7)) << g.Name();
    EXPECT_GE(measured, 0.95 * rate) << g.Name();
  }
}

TEST(SpectralGap, PushSumConsensusContractsAtThePredictedRate) {
  // Push-sum: x <- A x, y <- A y with y_0 = 1; z = x / y tends to the mean of x_0.
  std::vector<Graph> graphs = {*RingGraph(8), *ExponentialGraph(12), *OnePeerExponentialGraph(12),
                               *OnePeerExponentialGraph(6),
                               // Strongly connected with unequal out-degrees: not circulant.
                               *Graph::Create("irregular", 5, {{{1, 2}, {2}, {3}, {0, 4}, {0}}})};
  SplitMix64 rng(33);
  for (const Graph& g : graphs) {
    const int n = g.NumNodes();
    auto estimate = GraphSpectralGap(g);
    ASSERT_TRUE(estimate) << estimate.error().ToString();
    ASSERT_TRUE(estimate->converged) << g.Name();
    const double rate = estimate->rate_per_period;
    const int period = g.Period();
    std::vector<std::vector<double>> rounds;
    for (int t = 0; t < period; ++t) rounds.push_back(PushSumMatrix(g, t));
    std::vector<double> x = RandomVector(n, rng), y(n, 1.0);
    double mean = 0.0;
    for (double v : x) mean += v / n;
    // Periods until the error is about 1e-9 of the start: far above rounding noise.
    const int periods = static_cast<int>(std::ceil(std::log(1e-9) / std::log(rate)));
    std::vector<double> error;
    for (int k = 0; k <= periods; ++k) {
      std::vector<double> z(n);
      for (int i = 0; i < n; ++i) z[i] = x[i] / y[i];
      error.push_back(DistanceToMean(z, mean));
      for (const auto& a : rounds) {
        x = Apply(a, x);
        y = Apply(a, y);
      }
    }
    const int half = periods / 2;
    const double measured = std::pow(error[periods] / error[half], 1.0 / (periods - half));
    // Asymptotically the error shrinks by |lambda_2| per period; over a finite window
    // the weights y and the non-normal part of A bend it a little: 10%.
    EXPECT_NEAR(measured, rate, 0.10 * rate) << g.Name();
  }
}

TEST(SpectralGap, DisconnectedGraphsHaveNoGap) {
  // Two components: W has eigenvalue 1 twice, so |lambda_2| = 1 and nothing mixes across.
  auto split = GraphSpectralGap(*Graph::Create("two edges", 4, {{{1}, {0}, {3}, {2}}}));
  ASSERT_TRUE(split);
  EXPECT_TRUE(split->exact);
  EXPECT_NEAR(split->gap_per_round, 0.0, kJacobiTolerance);
  EXPECT_GE(split->gap_per_round, 0.0);
  // Two directed 3-cycles: push-sum keeps each cycle's mass, the rate is 1. The readout
  // stops at 1e-6 relative agreement, hence 1e-5.
  auto cycles = GraphSpectralGap(*Graph::Create("two cycles", 6, {{{1}, {2}, {0}, {4}, {5}, {3}}}));
  ASSERT_TRUE(cycles) << cycles.error().ToString();
  EXPECT_FALSE(cycles->exact);
  EXPECT_NEAR(cycles->rate_per_period, 1.0, 1e-5);
  EXPECT_NEAR(cycles->gap_per_round, 0.0, 1e-5);
  EXPECT_FALSE(ExpectedConsensusRounds(0.0, 1e-3));
}

TEST(SpectralGap, EstimateRejectsMatricesThatAreNotColumnStochastic) {
  EXPECT_FALSE(EstimateProductSpectralGap({{0.5, 0.5, 0.25, 0.75}}, 2));  // column 0 sums to 0.75
  EXPECT_FALSE(EstimateProductSpectralGap({}, 2));
  EXPECT_FALSE(EstimateProductSpectralGap({{1.0}}, 2));
  PowerIterationOptions options;
  options.num_vectors = 0;
  EXPECT_FALSE(EstimateProductSpectralGap({{0.5, 0.5, 0.5, 0.5}}, 2, options));
}

TEST(SpectralGap, ExpectedConsensusRounds) {
  EXPECT_EQ(*ExpectedConsensusRounds(0.5, 1e-3), 10);  // 0.5^10 = 9.8e-4, 0.5^9 = 2e-3
  EXPECT_EQ(*ExpectedConsensusRounds(0.1, 0.5), 7);    // 0.9^7 = 0.478, 0.9^6 = 0.531
  EXPECT_EQ(*ExpectedConsensusRounds(1.0, 1e-12), 1);
  EXPECT_GT(*ExpectedConsensusRounds(1e-12, 0.5), int64_t{600'000'000'000});
  EXPECT_FALSE(ExpectedConsensusRounds(0.0, 0.5));
  EXPECT_FALSE(ExpectedConsensusRounds(-0.1, 0.5));
  EXPECT_FALSE(ExpectedConsensusRounds(1.5, 0.5));
  EXPECT_FALSE(ExpectedConsensusRounds(std::nan(""), 0.5));
  EXPECT_FALSE(ExpectedConsensusRounds(0.5, 0.0));
  EXPECT_FALSE(ExpectedConsensusRounds(0.5, 1.0));
}

}  // namespace
}  // namespace chorus::topologies
