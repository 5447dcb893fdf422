// Thread count for the CPU kernels, process-wide. OpenMP is the only thread
// pool: its loops and the blocks of Gemm (gemm.cc) run on it, and OpenBLAS is
// kept single-threaded so the two never compete for cores. The count is stored
// here rather than only in OpenMP's per-thread setting, so that a training loop
// running on another thread than the one that called SetThreads still gets it.
// Must not start threads.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace chorus::kernels {
namespace {

std::atomic<int> configured_threads{0};  // 0: not set, use OpenMP's default

constexpr double kReferenceRegionSeconds = 5e-6;
constexpr double kMaxScale = 64.0;

// RegionSeconds for the thread count in measured_for (0: none yet).
std::atomic<int> measured_for{0};
std::atomic<double> region_seconds{0.0};
std::mutex measure_mutex;
std::atomic<bool> overridden{false};

double MeasureRegion(int threads) {
  using Clock = std::chrono::steady_clock;
  constexpr int kWarmup = 3;
  std::array<double, 9> seconds{};
  for (int i = 0; i < kWarmup; ++i) {
#pragma omp parallel num_threads(threads)
    { asm volatile("" ::: "memory"); }
  }
  for (double& s : seconds) {
    const auto start = Clock::now();
#pragma omp parallel num_threads(threads)
    { asm volatile("" ::: "memory"); }
    s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

void SetThreads(int threads) {
  threads = std::max(1, threads);
  configured_threads.store(threads, std::memory_order_relaxed);
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

int Threads() { return cpu::KernelThreads(); }

int ThreadsFor(size_t elements, size_t parallel_min) {
  return elements >= cpu::ParallelMin(parallel_min) ? cpu::KernelThreads() : 1;
}

namespace cpu {

double RegionSeconds() {
  const int threads = KernelThreads();
  if (threads <= 1) return 0.0;
  if (overridden.load(std::memory_order_acquire)) return region_seconds.load(std::memory_order_relaxed);
  if (measured_for.load(std::memory_order_acquire) == threads) {
    return region_seconds.load(std::memory_order_relaxed);
  }
  // Inside a region (a kernel called from an OpenMP loop) nothing runs in
  // parallel anyway, and measuring there would nest.
  if (omp_in_parallel()) return region_seconds.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(measure_mutex);
  if (measured_for.load(std::memory_order_acquire) != threads) {
    region_seconds.store(MeasureRegion(threads), std::memory_order_relaxed);
    measured_for.store(threads, std::memory_order_release);
  }
  return region_seconds.load(std::memory_order_relaxed);
}

void OverrideRegionSeconds(double seconds) {
  std::lock_guard<std::mutex> lock(measure_mutex);
  region_seconds.store(seconds, std::memory_order_relaxed);
  overridden.store(seconds >= 0.0, std::memory_order_release);
  measured_for.store(0, std::memory_order_release);
}

size_t ParallelMin(size_t base) {
  const double scale = std::clamp(RegionSeconds() / kReferenceRegionSeconds, 1.0, kMaxScale);
  return static_cast<size_t>(std::llround(static_cast<double>(base) * scale));
}

int KernelThreads() {
  const int threads = configured_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace cpu
}  // namespace chorus::kernels
