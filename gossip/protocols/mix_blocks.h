// The elementwise mixing of D-PSGD and CHOCO over a flat parameter vector,
// with the neighbour-mean distance of the round's estimate. Each element is
// computed in double with the rows added in the order given, so the result is
// bit for bit that of an element-at-a-time loop on every CPU; only the order of
// the diff2 and norm2 sums (an estimate) is left open. Loops run over blocks of
// 256 elements, the rows' loop outside and the elements' inside, so that they
// vectorise.
#pragma once

#include <cstddef>

namespace chorus::gossip {

struct MixRows {
  const float* const* rows;  // count rows of the neighbours' values, each n long
  const double* weights;     // count weights, one per row
  size_t count;
};

struct MixSums {
  double diff2 = 0.0;  // sum_i (x_i - mean_k rows_k,i)^2 over the x before the mix; 0 without rows
  double norm2 = 0.0;  // sum_i x_i^2 over the x before the mix
};

// D-PSGD: x_i <- self_weight * x_i + sum_k w_k rows_k,i.
MixSums MixWeighted(float* x, size_t n, double self_weight, const MixRows& rows);

// CHOCO: x_i <- x_i + gamma * sum_k w_k (rows_k,i - own_i), own being the
// node's own public copy.
MixSums StepTowards(float* x, size_t n, const float* own, double gamma, const MixRows& rows);

}  // namespace chorus::gossip
