// CPU ReLU. Forward lets NaN through (so loss scaling still sees it); backward
// uses the forward output (dx = dy * (y > 0)), so it works in place (dx may
// alias dy). Plain OpenMP loops; nothing here allocates.
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Below this many elements an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

}  // namespace

template <typename T>
void ReluForward(const Context& ctx, size_t count, const T* x, T* y) {
#pragma omp parallel for num_threads(cpu::KernelThreads()) \
    schedule(static) if (count >= kParallelElems)
  for (size_t i = 0; i < count; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
}

template <typename T>
void ReluBackward(const Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
#pragma omp parallel for num_threads(cpu::KernelThreads()) \
    schedule(static) if (count >= kParallelElems)
  for (size_t i = 0; i < count; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

#define CHORUS_INSTANTIATE_RELU(T)                                    \
  template void ReluForward<T>(const Context&, size_t, const T*, T*); \
  template void ReluBackward<T>(const Context&, size_t, const T*, const T*, T*);
CHORUS_INSTANTIATE_RELU(float)
CHORUS_INSTANTIATE_RELU(double)
#undef CHORUS_INSTANTIATE_RELU

}  // namespace chorus::kernels
