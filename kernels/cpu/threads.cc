// Thread count for the CPU kernels, process-wide. OpenMP is the only thread
// pool: its loops and the blocks of Gemm (gemm.cc) run on it, and OpenBLAS is
// kept single-threaded so the two never compete for cores. The count is stored
// here rather than only in OpenMP's per-thread setting, so that a training loop
// running on another thread than the one that called SetThreads still gets it.
// Must not start threads.
#include <omp.h>

#include <algorithm>
#include <atomic>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace chorus::kernels {
namespace {

std::atomic<int> configured_threads{0};  // 0: not set, use OpenMP's default

}  // namespace

void SetThreads(int threads) {
  threads = std::max(1, threads);
  configured_threads.store(threads, std::memory_order_relaxed);
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

int Threads() { return cpu::KernelThreads(); }

namespace cpu {

int KernelThreads() {
  const int threads = configured_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace cpu
}  // namespace chorus::kernels
