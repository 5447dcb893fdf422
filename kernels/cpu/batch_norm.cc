// CPU batch normalisation over x [N, C, HW], per channel c over N and HW.
//
// Training: mean and (biased) variance of channel c over m = N*HW values, two
// passes in double (SIMD reductions: `omp simd` allows the reordering); y = (x - mean) * inv_std * gamma + beta with
// inv_std = 1 / sqrt(var + eps). save_mean / save_inv_std keep what backward
// needs; running stats move by `momentum` towards the batch mean and the
// unbiased variance var * m / (m - 1) (as PyTorch). Backward is the usual
//   dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)).
// Channels run in parallel (OpenMP); nothing here allocates.
#include <cmath>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Below this many elements an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

}  // namespace

template <typename T>
void BatchNormForwardTrain(const Context& ctx, const BatchNormShape& shape, const T* x,
                           const T* gamma, const T* beta, T* y, T* save_mean, T* save_inv_std,
                           T* running_mean, T* running_var) {
  const int n = shape.n, channels = shape.c;
  const size_t hw = static_cast<size_t>(shape.hw);
  const size_t image = static_cast<size_t>(channels) * hw;
  const size_t m = static_cast<size_t>(n) * hw;
  if (m == 0) return;
  const bool parallel = m * channels >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel)
  for (int c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      const T* src = x + i * image + c * hw;
#pragma omp simd reduction(+ : sum)
      for (size_t j = 0; j < hw; ++j) sum += static_cast<double>(src[j]);
    }
    const double mean = sum / static_cast<double>(m);
    double sq = 0.0;
    for (int i = 0; i < n; ++i) {
      const T* src = x + i * image + c * hw;
#pragma omp simd reduction(+ : sq)
      for (size_t j = 0; j < hw; ++j) {
        const double d = static_cast<double>(src[j]) - mean;
        sq += d * d;
      }
    }
    const double var = sq / static_cast<double>(m);
    const double inv_std = 1.0 / std::sqrt(var + shape.eps);
    // (x - mean) before scaling: no cancellation when |mean| >> std.
    const T mean_t = static_cast<T>(mean);
    const T scale = static_cast<T>(static_cast<double>(gamma[c]) * inv_std);
    const T shift = beta[c];
    for (int i = 0; i < n; ++i) {
      const T* src = x + i * image + c * hw;
      T* dst = y + i * image + c * hw;
      for (size_t j = 0; j < hw; ++j) dst[j] = (src[j] - mean_t) * scale + shift;
    }
    save_mean[c] = static_cast<T>(mean);
    save_inv_std[c] = static_cast<T>(inv_std);
    if (running_mean != nullptr && running_var != nullptr) {
      const double unbiased =
          m > 1 ? var * static_cast<double>(m) / static_cast<double>(m - 1) : var;
      running_mean[c] =
          static_cast<T>((1.0 - shape.momentum) * running_mean[c] + shape.momentum * mean);
      running_var[c] =
          static_cast<T>((1.0 - shape.momentum) * running_var[c] + shape.momentum * unbiased);
    }
  }
}

template <typename T>
void BatchNormForwardEval(const Context& ctx, const BatchNormShape& shape, const T* x,
                          const T* gamma, const T* beta, const T* running_mean,
                          const T* running_var, T* y) {
  const int n = shape.n, channels = shape.c;
  const size_t hw = static_cast<size_t>(shape.hw);
  const size_t image = static_cast<size_t>(channels) * hw;
  const bool parallel = static_cast<size_t>(n) * image >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel)
  for (int c = 0; c < channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + shape.eps);
    const T mean_t = running_mean[c];
    const T scale = static_cast<T>(static_cast<double>(gamma[c]) * inv_std);
    const T shift = beta[c];
    for (int i = 0; i < n; ++i) {
      const T* src = x + i * image + c * hw;
      T* dst = y + i * image + c * hw;
      for (size_t j = 0; j < hw; ++j) dst[j] = (src[j] - mean_t) * scale + shift;
    }
  }
}

template <typename T>
void BatchNormBackward(const Context& ctx, const BatchNormShape& shape, const T* x, const T* gamma,
                       const T* save_mean, const T* save_inv_std, const T* dy, T* dx, T* dgamma,
                       T* dbeta) {
  const int n = shape.n, channels = shape.c;
  const size_t hw = static_cast<size_t>(shape.hw);
  const size_t image = static_cast<size_t>(channels) * hw;
  const size_t m = static_cast<size_t>(n) * hw;
  if (m == 0) return;
  const bool parallel = m * channels >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel)
  for (int c = 0; c < channels; ++c) {
    const double mean = static_cast<double>(save_mean[c]);
    const double inv_std = static_cast<double>(save_inv_std[c]);
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int i = 0; i < n; ++i) {
      const T* xs = x + i * image + c * hw;
      const T* gs = dy + i * image + c * hw;
#pragma omp simd reduction(+ : sum_dy, sum_dy_xmu)
      for (size_t j = 0; j < hw; ++j) {
        const double g = static_cast<double>(gs[j]);
        sum_dy += g;
        sum_dy_xmu += g * (static_cast<double>(xs[j]) - mean);
      }
    }
    const double sum_dy_xhat = sum_dy_xmu * inv_std;
    dbeta[c] = static_cast<T>(sum_dy);
    dgamma[c] = static_cast<T>(sum_dy_xhat);
    if (dx == nullptr) continue;
    // dx = a * dy + b * (x - mean) + d, per-channel constants folded in double.
    const double inv_m = 1.0 / static_cast<double>(m);
    const double k = static_cast<double>(gamma[c]) * inv_std;
    const T a = static_cast<T>(k);
    const T b = static_cast<T>(-k * sum_dy_xhat * inv_std * inv_m);
    const T d = static_cast<T>(-k * sum_dy * inv_m);
    const T mean_t = save_mean[c];
    for (int i = 0; i < n; ++i) {
      const T* xs = x + i * image + c * hw;
      const T* gs = dy + i * image + c * hw;
      T* dst = dx + i * image + c * hw;
      for (size_t j = 0; j < hw; ++j) dst[j] = a * gs[j] + b * (xs[j] - mean_t) + d;
    }
  }
}

#define CHORUS_INSTANTIATE_BN(T)                                                                   \
  template void BatchNormForwardTrain<T>(const Context&, const BatchNormShape&, const T*,          \
                                         const T*, const T*, T*, T*, T*, T*, T*);                  \
  template void BatchNormForwardEval<T>(const Context&, const BatchNormShape&, const T*, const T*, \
                                        const T*, const T*, const T*, T*);                         \
  template void BatchNormBackward<T>(const Context&, const BatchNormShape&, const T*, const T*,    \
                                     const T*, const T*, const T*, T*, T*, T*);
CHORUS_INSTANTIATE_BN(float)
CHORUS_INSTANTIATE_BN(double)
#undef CHORUS_INSTANTIATE_BN

}  // namespace chorus::kernels
