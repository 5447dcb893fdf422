// ForEachBlock: a range split into one contiguous block per kernel thread
// (internal to kernels/cpu; needs OpenMP, which only kernels/cpu compiles with).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/parallel.h"

namespace chorus::kernels::cpu {

// fn(begin, end) over [0, count) split into one contiguous block per thread
// (a single call when count < ParallelMin(parallel_min)): for loops kept in
// separate functions, such as CHORUS_VECTOR_CLONES ones.
template <typename Fn>
void ForEachBlock(size_t count, size_t parallel_min, const Fn& fn) {
  const int threads = count >= ParallelMin(parallel_min) ? KernelThreads() : 1;
  if (threads <= 1) {
    fn(size_t{0}, count);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t begin = count / nt * t + std::min(t, count % nt);
    const size_t end = begin + count / nt + (t < count % nt ? 1 : 0);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace chorus::kernels::cpu
