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
#include <vector>
#include <thread>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace chorus::kernels {
namespace {

std::atomic<int> configured_threads{0};  // 0: not set, use OpenMP's default

// The fork-join cost the kernels' fixed sizes were chosen at (about 2 us,
// measured where those sizes were set).
constexpr double kReferenceRegionSeconds = 2e-6;
constexpr double kMaxScale = 64.0;

// RegionSeconds for the thread count in measured_for (0: none yet).
std::atomic<int> measured_for{0};
std::atomic<double> region_seconds{0.0};
std::mutex measure_mutex;
std::atomic<bool> overridden{false};

float SumBlock(const float* x, size_t count) {
  float sum = 0.0f;
  for (size_t i = 0; i < count; ++i) sum += x[i];
  asm volatile("" : "+x"(sum));
  return sum;
}

// What a region costs a loop, against the loop alone: a streaming loop over
// 4 MB (about the MLP's optimizer state) run by one thread, then split over
// the threads in a region entered after a pause in which they went to sleep,
// as between a step's regions. The cost is the region's time minus the share
// of the loop alone: wake-ups, the join, the late start of the threads woken,
// and whatever the threads do not gain from sharing cores or memory (two
// hardware threads of one core gain little on a streaming loop).
double MeasureRegion(int threads) {
  using Clock = std::chrono::steady_clock;
  auto seconds_of = [](auto&& fn) {
    const auto start = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const size_t count = size_t{1} << 20;
  const std::vector<float> data(count, 1.0f);
  const size_t block = (count + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  auto split = [&] {
#pragma omp parallel num_threads(threads)
    {
      const size_t begin = std::min(count, block * static_cast<size_t>(omp_get_thread_num()));
      SumBlock(data.data() + begin, std::min(count, begin + block) - begin);
    }
  };
  split();
  std::array<double, 7> costs{};
  for (double& cost : costs) {
    const double alone = seconds_of([&] { SumBlock(data.data(), count); });
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    cost = seconds_of(split) - alone / threads;
  }
  std::nth_element(costs.begin(), costs.begin() + costs.size() / 2, costs.end());
  return std::max(0.0, costs[costs.size() / 2]);
}

}  // namespace

void SetThreads(int threads) {
  threads = std::max(1, threads);
  configured_threads.store(threads, std::memory_order_relaxed);
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

int Threads() { return cpu::KernelThreads(); }

double ParallelRegionSeconds() { return cpu::RegionSeconds(); }

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
