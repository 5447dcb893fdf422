// CPU ReLU. Forward lets NaN through (so loss scaling still sees it); backward
// uses the forward output (dx = dy * (y > 0)), so it works in place (dx may
// alias dy). One block per thread, each a vectorised loop (CHORUS_VECTOR_CLONES
// for float); nothing here allocates.
#include "kernels/cpu/for_each_block.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "kernels/vector_clones.h"

namespace chorus::kernels {
namespace {

// Below this many elements an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

// The loops, written once: the float overloads below are CHORUS_VECTOR_CLONES
// entry points, and each clone inlines the loop with its own instruction set.
template <typename T>
[[gnu::always_inline]] inline void ReluForwardBlock(size_t count, const T* x, T* y) {
  for (size_t i = 0; i < count; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
}
CHORUS_VECTOR_CLONES void ReluForwardBlock(size_t count, const float* x, float* y) {
  ReluForwardBlock<float>(count, x, y);
}

template <typename T>
[[gnu::always_inline]] inline void ReluBackwardBlock(size_t count, const T* y, const T* dy,
                                                     T* dx) {
  for (size_t i = 0; i < count; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}
CHORUS_VECTOR_CLONES void ReluBackwardBlock(size_t count, const float* y, const float* dy,
                                            float* dx) {
  ReluBackwardBlock<float>(count, y, dy, dx);
}

}  // namespace

template <typename T>
void ReluForward(const Context& ctx, size_t count, const T* x, T* y) {
  cpu::ForEachBlock(count, kParallelElems, [&](size_t begin, size_t end) {
    ReluForwardBlock(end - begin, x + begin, y + begin);
  });
}

template <typename T>
void ReluBackward(const Context& ctx, size_t count, const T* y, const T* dy, T* dx) {
  cpu::ForEachBlock(count, kParallelElems, [&](size_t begin, size_t end) {
    ReluBackwardBlock(end - begin, y + begin, dy + begin, dx + begin);
  });
}

#define CHORUS_INSTANTIATE_RELU(T)                                    \
  template void ReluForward<T>(const Context&, size_t, const T*, T*); \
  template void ReluBackward<T>(const Context&, size_t, const T*, const T*, T*);
CHORUS_INSTANTIATE_RELU(float)
CHORUS_INSTANTIATE_RELU(double)
#undef CHORUS_INSTANTIATE_RELU

}  // namespace chorus::kernels
