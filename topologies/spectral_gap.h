// Spectral gap of a gossip mixing scheme: how fast x <- W x reaches consensus.
//
// The gap is 1 - |lambda_2(W)|, lambda_2 the second-largest eigenvalue of W in
// magnitude (the largest is 1 for a stochastic W). The distance to the average then
// shrinks like |lambda_2|^k after k rounds (for symmetric W, ||x_k - mean|| <=
// |lambda_2|^k ||x_0 - mean|| exactly; otherwise asymptotically).
//  - Symmetric W (Metropolis-Hastings on an undirected graph): all eigenvalues by the
//    cyclic Jacobi method; exact up to rounding.
//  - Column-stochastic, possibly time-varying W_0..W_{P-1} (push-sum): |lambda_2| of the
//    period product M = W_{P-1} ... W_0 is estimated by power iteration on the subspace
//    of zero-sum vectors (M minus the consensus part (1/n) 1 1^T acts there as M,
//    because 1^T W = 1^T keeps sums). See PowerIterationOptions for the stopping rule.
//    The per-round gap is 1 - rate^(1/P).
// Pure and std only; small dense matrices (n up to a few hundred).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "topologies/graph.h"

namespace chorus::topologies {

// All eigenvalues of the symmetric n x n matrix `a` (row-major), ascending.
// Fails when the size is not n*n or `a` is not symmetric (to 1e-12 relative).
Result<std::vector<double>> SymmetricEigenvalues(std::vector<double> a, int n);

// 1 - |lambda_2| of a symmetric stochastic n x n matrix, clamped to [0, 1] (0 for a
// disconnected graph, whose |lambda_2| is 1 up to rounding); 1 for n = 1. Fails when
// `w` is not symmetric or a row does not sum to 1 (within 1e-9: n rounded terms).
Result<double> SymmetricSpectralGap(const std::vector<double>& w, int n);

struct PowerIterationOptions {
  // Random start vectors (zero-sum, unit norm); the largest rate over them is kept,
  // which guards against a start vector that misses the dominant direction.
  int num_vectors = 2;
  // Stopping rule. The unit iterate x_k = M^k x_0 / ||M^k x_0|| (kept zero-sum) is read
  // two ways, and the first that settles is the answer:
  //  1. Ritz readout, every check_every periods from min_periods on: with y1 = M x_k and
  //     y2 = M y1, if ||y1 - (x_k.y1) x_k|| <= residual_tolerance ||y1|| the rate is
  //     |x_k.y1| (x_k is a real eigenvector); else if the least-squares fit
  //     y2 = a y1 + b x_k leaves a residual <= residual_tolerance ||y2||, the rate is the
  //     larger root modulus of z^2 = a z + b (x_k spans a complex pair or +-lambda).
  //     Converged when two successive readouts agree to `tolerance` relative.
  //  2. Growth windows: L_k is the sum of log growth factors over the first k period
  //     products and r(k) = exp((L_k - L_{k/2}) / (k - k/2)) the geometric-mean growth over
  //     the second half. At k = min_periods, 2 min_periods, 4 min_periods, ... converged
  //     when |r(k) - r(k/2)| <= tolerance * r(k). This one needs no invariant subspace of
  //     dimension <= 2 (e.g. several eigenvalues of equal modulus) but converges slowly
  //     when the norm oscillates (non-normal M with a complex dominant pair).
  // A period product that shrinks a unit vector below 1e-12 ends it with rate 0.
  double tolerance = 1e-6;
  double residual_tolerance = 1e-7;
  int min_periods = 32;
  int check_every = 8;
  // At most this many period products per start vector; then converged = false.
  int max_periods = 1 << 16;
  uint64_t seed = 1;
};

struct SpectralGapEstimate {
  double gap_per_round = 0.0;    // 1 - rate_per_period^(1 / period), clamped to [0, 1]
  double rate_per_period = 0.0;  // |lambda_2| of the product over one period
  int period = 1;
  int64_t iterations = 0;  // period products applied, over all start vectors; 0 if exact
  bool exact = false;      // true when computed by the symmetric eigenvalue solver
  bool converged = true;   // false when power iteration hit max_periods
};

// Estimates |lambda_2| of rounds[P-1] * ... * rounds[0]. Each matrix is n x n
// row-major and must be column stochastic (column sums 1 within 1e-9).
Result<SpectralGapEstimate> EstimateProductSpectralGap(
    const std::vector<std::vector<double>>& rounds, int n, const PowerIterationOptions& options = {});

// The gap of the graph's default mixing: exact (Jacobi on Metropolis-Hastings) for an
// undirected graph, else power iteration on the push-sum matrices of one period.
Result<SpectralGapEstimate> GraphSpectralGap(const Graph& graph,
                                             const PowerIterationOptions& options = {});

// Rounds k with (1 - gap)^k <= eps: how many rounds shrink the distance to consensus
// by the factor eps. Needs 0 < gap <= 1 and 0 < eps < 1; gap = 1 gives 1.
Result<int64_t> ExpectedConsensusRounds(double gap, double eps);

}  // namespace chorus::topologies
