// CPU max-pooling (square window, stride = window, no padding).
//
// MaxPoolForward records, for each output, the flat index into x of the first
// maximum of its window (strict > keeps the first on ties), or -1 when a fused
// ReLU zeroed it; MaxPoolBackward routes dy through those indices. Windows do
// not overlap, so backward writes each dx element at most once per plane and
// planes run in parallel.
// Plain loops; nothing here allocates.
#include <algorithm>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Below this many elements an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

}  // namespace

template <typename T>
void MaxPoolForward(const Context& ctx, int n, int c, int h, int w, int size, const T* x, T* y,
                    int32_t* argmax, bool relu) {
  if (n <= 0 || c <= 0 || size <= 0) return;
  const int out_h = h / size, out_w = w / size;
  const size_t plane_in = static_cast<size_t>(h) * w;
  const size_t plane_out = static_cast<size_t>(out_h) * out_w;
  const int planes = n * c;
  const bool parallel = plane_in * planes >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel)
  for (int plane = 0; plane < planes; ++plane) {
    const size_t base_in = plane * plane_in;
    const T* src = x + base_in;
    T* dst = y + plane * plane_out;
    int32_t* arg = argmax + plane * plane_out;
    for (int p = 0; p < out_h; ++p) {
      for (int q = 0; q < out_w; ++q) {
        size_t best = static_cast<size_t>(p) * size * w + static_cast<size_t>(q) * size;
        T best_value = src[best];
        for (int dr = 0; dr < size; ++dr) {
          const size_t row =
              (static_cast<size_t>(p) * size + dr) * w + static_cast<size_t>(q) * size;
          for (int ds = 0; ds < size; ++ds) {
            if (src[row + ds] > best_value) {
              best_value = src[row + ds];
              best = row + ds;
            }
          }
        }
        int32_t index = static_cast<int32_t>(base_in + best);
        if (relu) {
          // As ReluForward (NaN passes) and ReluBackward (gradient only where y > 0).
          if (!(best_value > T(0))) index = -1;
          if (best_value < T(0)) best_value = T(0);
        }
        dst[static_cast<size_t>(p) * out_w + q] = best_value;
        arg[static_cast<size_t>(p) * out_w + q] = index;
      }
    }
  }
}

template <typename T>
void MaxPoolBackward(const Context& ctx, int n, int c, int h, int w, int size, const T* dy,
                     const int32_t* argmax, T* dx) {
  if (n <= 0 || c <= 0 || size <= 0) return;
  const int out_h = h / size, out_w = w / size;
  const size_t plane_in = static_cast<size_t>(h) * w;
  const size_t plane_out = static_cast<size_t>(out_h) * out_w;
  const int planes = n * c;
  const bool parallel = plane_in * planes >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel)
  for (int plane = 0; plane < planes; ++plane) {
    std::fill(dx + plane * plane_in, dx + (plane + 1) * plane_in, T(0));
    const T* src = dy + plane * plane_out;
    const int32_t* arg = argmax + plane * plane_out;
    for (size_t j = 0; j < plane_out; ++j) {
      if (arg[j] >= 0) dx[arg[j]] += src[j];
    }
  }
}

#define CHORUS_INSTANTIATE_POOL(T)                                                       \
  template void MaxPoolForward<T>(const Context&, int, int, int, int, int, const T*, T*, \
                                  int32_t*, bool);                                       \
  template void MaxPoolBackward<T>(const Context&, int, int, int, int, int, const T*,    \
                                   const int32_t*, T*);
CHORUS_INSTANTIATE_POOL(float)
CHORUS_INSTANTIATE_POOL(double)
#undef CHORUS_INSTANTIATE_POOL

}  // namespace chorus::kernels
