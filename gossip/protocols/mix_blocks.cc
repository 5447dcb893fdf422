// Blocked mixing loops (mix_blocks.h).
#include "gossip/protocols/mix_blocks.h"

#include <algorithm>

#include "kernels/vector_clones.h"

namespace chorus::gossip {
namespace {

constexpr size_t kBlock = 256;  // elements per block: a few 2 KiB double arrays on the stack

// The sum of v[0, kBlock), halving in place: loops without a carried sum,
// which vectorise.
[[gnu::always_inline]] inline double TreeSum(double* v) {
  for (size_t half = kBlock / 2; half >= 1; half /= 2) {
    for (size_t i = 0; i < half; ++i) v[i] += v[i + half];
  }
  return v[0];
}

// Adds block [0, m)'s estimate terms to *sums and stores next(i, x_i) into x[i].
template <typename Next>
[[gnu::always_inline]] inline void FinishBlock(size_t m, float* x, const double* mean, size_t count, Next next,
                                               MixSums* sums) {
  const double inverse = count == 0 ? 0.0 : 1.0 / static_cast<double>(count);
  double d2[kBlock];
  double x2[kBlock];
  for (size_t i = 0; i < m; ++i) {
    const double xi = x[i];
    const double d = xi - mean[i] * inverse;
    d2[i] = d * d;
    x2[i] = xi * xi;
    x[i] = next(i, xi);
  }
  for (size_t i = m; i < kBlock; ++i) d2[i] = x2[i] = 0.0;
  if (count > 0) sums->diff2 += TreeSum(d2);
  sums->norm2 += TreeSum(x2);
}

CHORUS_VECTOR_CLONES void MixWeightedBlock(size_t m, size_t begin, float* x, double self_weight, const MixRows& rows,
                                           MixSums* sums) {
  double acc[kBlock];
  double mean[kBlock] = {};
  for (size_t i = 0; i < m; ++i) acc[i] = self_weight * static_cast<double>(x[i]);
  for (size_t k = 0; k < rows.count; ++k) {
    const float* r = rows.rows[k] + begin;
    const double w = rows.weights[k];
    for (size_t i = 0; i < m; ++i) {
      const double v = r[i];
      acc[i] += w * v;
      mean[i] += v;
    }
  }
  FinishBlock(m, x, mean, rows.count, [&](size_t i, double) { return static_cast<float>(acc[i]); }, sums);
}

CHORUS_VECTOR_CLONES void StepTowardsBlock(size_t m, size_t begin, float* x, const float* own, double gamma,
                                           const MixRows& rows, MixSums* sums) {
  double step[kBlock] = {};
  double mean[kBlock] = {};
  for (size_t k = 0; k < rows.count; ++k) {
    const float* r = rows.rows[k] + begin;
    const double w = rows.weights[k];
    for (size_t i = 0; i < m; ++i) {
      const double v = r[i];
      step[i] += w * (v - static_cast<double>(own[i]));
      mean[i] += v;
    }
  }
  FinishBlock(m, x, mean, rows.count, [&](size_t i, double xi) { return static_cast<float>(xi + gamma * step[i]); },
              sums);
}

}  // namespace

MixSums MixWeighted(float* x, size_t n, double self_weight, const MixRows& rows) {
  MixSums sums;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    MixWeightedBlock(std::min(kBlock, n - begin), begin, x + begin, self_weight, rows, &sums);
  }
  return sums;
}

MixSums StepTowards(float* x, size_t n, const float* own, double gamma, const MixRows& rows) {
  MixSums sums;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    StepTowardsBlock(std::min(kBlock, n - begin), begin, x + begin, own + begin, gamma, rows, &sums);
  }
  return sums;
}

}  // namespace chorus::gossip
