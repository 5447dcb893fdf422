// CPU vector ops for the optimizer and mixed precision: SumSquares (double
// accumulation), SumSquaresWithin, AllFinite, Axpy, Scale. OpenMP loops, static schedule, above a
// size threshold; results of the reductions depend only on the thread count
// (below the threshold: one thread, whatever the count). Only a parallel
// SumSquares allocates (one partial sum per thread).
#include <omp.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/cpu/for_each_block.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "kernels/vector_clones.h"

namespace chorus::kernels {
namespace {

// Below this many elements an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

// Non-finite means the exponent field is all ones (Inf or NaN); a bit test
// vectorises where std::isfinite may not.
[[gnu::always_inline]] inline bool NotFinite(float v) { return (std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u; }
[[gnu::always_inline]] inline bool NotFinite(double v) {
  return (std::bit_cast<uint64_t>(v) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// The loops, written once: the float overloads are CHORUS_VECTOR_CLONES entry
// points, and each clone inlines the loop with its own instruction set.
// 1 when any element is not finite (an OR vectorises where a count may not).
template <typename T>
[[gnu::always_inline]] inline size_t AnyNotFinite(size_t count, const T* x) {
  unsigned bad = 0;
  for (size_t i = 0; i < count; ++i) bad |= NotFinite(x[i]) ? 1u : 0u;
  return bad;
}
CHORUS_VECTOR_CLONES size_t AnyNotFinite(size_t count, const float* x) {
  return AnyNotFinite<float>(count, x);
}

// ||x||^2 in double: 32 independent partial sums (combined in a fixed order)
// let the compiler vectorise without reassociating, with four 8-lane
// accumulators in flight so the adds' latency is hidden; the same bits on
// every clone. With kBound, *over is also set to 1 when any |x[i]| is above
// `limit` or NaN (an OR beside the sums, so the loop still vectorises); the
// sum is the same either way.
template <typename T, bool kBound>
[[gnu::always_inline]] inline double SumSquaresLanes(size_t count, const T* x, double limit, unsigned* over) {
  constexpr size_t kLanes = 32;
  double lane[kLanes] = {};
  unsigned bad = 0;
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lane[j] += v * v;
      if constexpr (kBound) bad |= std::fabs(v) <= limit ? 0u : 1u;
    }
  }
  double sum = 0.0;
  for (size_t j = 0; j < kLanes; ++j) sum += lane[j];
  for (; i < count; ++i) {
    const double v = static_cast<double>(x[i]);
    sum += v * v;
    if constexpr (kBound) bad |= std::fabs(v) <= limit ? 0u : 1u;
  }
  if constexpr (kBound) *over = bad;
  return sum;
}
template <typename T>
[[gnu::always_inline]] inline double SumSquaresBlock(size_t count, const T* x) {
  return SumSquaresLanes<T, false>(count, x, 0.0, nullptr);
}
CHORUS_VECTOR_CLONES double SumSquaresBlock(size_t count, const float* x) {
  return SumSquaresBlock<float>(count, x);
}
CHORUS_VECTOR_CLONES double SumSquaresWithinBlock(size_t count, const float* x, double limit, unsigned* over) {
  return SumSquaresLanes<float, true>(count, x, limit, over);
}

template <typename T>
[[gnu::always_inline]] inline void ScaleBlock(size_t count, T a, T* x) {
  for (size_t i = 0; i < count; ++i) x[i] *= a;
}
CHORUS_VECTOR_CLONES void ScaleBlock(size_t count, float a, float* x) {
  ScaleBlock<float>(count, a, x);
}

}  // namespace

template <typename T>
double SumSquares(const Context& ctx, size_t count, const T* x) {
  // One block per thread, the blocks' sums added in block order.
  const int threads = count >= cpu::ParallelMin(kParallelElems) ? cpu::KernelThreads() : 1;
  if (threads <= 1) return SumSquaresBlock(count, x);
  std::vector<double> partial(static_cast<size_t>(threads), 0.0);
  cpu::ForEachBlock(count, kParallelElems, [&](size_t begin, size_t end) {
    partial[static_cast<size_t>(omp_get_thread_num())] = SumSquaresBlock(end - begin, x + begin);
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

double SumSquaresWithin(size_t count, const float* x, double limit, bool* within) {
  unsigned over = 0;
  const double sum = SumSquaresWithinBlock(count, x, limit, &over);
  *within = over == 0;
  return sum;
}

template <typename T>
bool AllFinite(const Context& ctx, size_t count, const T* x) {
  std::atomic<size_t> bad{0};
  cpu::ForEachBlock(count, kParallelElems, [&](size_t begin, size_t end) {
    bad.fetch_add(AnyNotFinite(end - begin, x + begin), std::memory_order_relaxed);
  });
  return bad.load() == 0;
}

template <typename T>
void Axpy(const Context& ctx, size_t count, T a, const T* x, T* y) {
#pragma omp parallel for num_threads(cpu::KernelThreads()) \
    schedule(static) if (count >= cpu::ParallelMin(kParallelElems))
  for (size_t i = 0; i < count; ++i) y[i] += a * x[i];
}

template <typename T>
void Scale(const Context& ctx, size_t count, T a, T* x) {
  cpu::ForEachBlock(count, kParallelElems,
                    [&](size_t begin, size_t end) { ScaleBlock(end - begin, a, x + begin); });
}

#define CHORUS_INSTANTIATE_VECTOR(T)                               \
  template double SumSquares<T>(const Context&, size_t, const T*); \
  template bool AllFinite<T>(const Context&, size_t, const T*);    \
  template void Axpy<T>(const Context&, size_t, T, const T*, T*);  \
  template void Scale<T>(const Context&, size_t, T, T*);
CHORUS_INSTANTIATE_VECTOR(float)
CHORUS_INSTANTIATE_VECTOR(double)
#undef CHORUS_INSTANTIATE_VECTOR

}  // namespace chorus::kernels
