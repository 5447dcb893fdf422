// Times the CPU kernels on the shapes of the Fashion-MNIST models: the CNN's
// conv1 (1->32, 5x5, pad 2, 28x28) and conv2 (32->64, 5x5, pad 2, 14x14)
// forward + backward, and MLP/CNN-sized Linear layers. Prints milliseconds per
// call (median of a few repetitions), wall and CPU. Convolutions run with each
// backend in turn (oneDNN when the build has it, then im2col + GEMM), side by
// side. A benchmark, not a test: asserts nothing.
//
// Usage: bench_kernels [threads=2] [batch=64] [repetitions=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <vector>

#include "kernels/ops.h"

namespace {

using chorus::kernels::Context;
using chorus::kernels::Conv2dShape;

// Over `repetitions` calls: the median wall time and the minimum process CPU
// time divided by the thread count, in ms. On a shared, loaded machine the
// second is the better estimate of what the call costs on idle cores
// (time spent spinning in OpenMP still counts).
struct Timing {
  double wall_ms = 0;
  double cpu_ms = 0;
};

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int g_threads = 1;

Timing Median(int repetitions, const std::function<void()>& fn) {
  fn();  // warm-up: page in buffers, start thread pools
  std::vector<double> wall, cpu;
  for (int i = 0; i < repetitions; ++i) {
    const double cpu_start = CpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    fn();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    cpu.push_back((CpuSeconds() - cpu_start) * 1e3 / g_threads);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu.front()};
}

void BenchConv(const char* name, const Conv2dShape& s, bool with_dx, int repetitions) {
  const Context ctx;
  const char* backend = chorus::kernels::ConvUsesOnednn() ? "onednn" : "im2col";
  std::vector<float> x(static_cast<size_t>(s.n) * s.c * s.h * s.w, 0.5f);
  std::vector<float> w(static_cast<size_t>(s.k) * s.c * s.r * s.s, 0.01f), b(s.k, 0.1f);
  std::vector<float> y(static_cast<size_t>(s.n) * s.k * s.OutH() * s.OutW());
  std::vector<float> dy(y.size(), 0.01f), dx(x.size()), dw(w.size()), db(s.k);
  std::vector<float> ws(s.WorkspaceElems());
  const Timing fwd = Median(repetitions, [&] {
    chorus::kernels::Conv2dForward<float>(ctx, s, x.data(), w.data(), b.data(), y.data(),
                                          ws.data());
  });
  const Timing bwd = Median(repetitions, [&] {
    chorus::kernels::Conv2dBackward<float>(ctx, s, x.data(), w.data(), dy.data(),
                                           with_dx ? dx.data() : nullptr, dw.data(), db.data(),
                                           ws.data());
  });
  const double gflop = 2.0 * s.n * s.k * s.c * s.r * s.s * s.OutH() * s.OutW() * 1e-9;
  const double total_gflop = gflop * (with_dx ? 3 : 2);
  std::printf(
      "%-6s %-6s n=%d wall (median): fwd %.2f + bwd%s %.2f = %.2f ms; cpu/thread (min): "
      "fwd %.2f + bwd %.2f = %.2f ms (%.0f GFLOP/s)\n",
      name, backend, s.n, fwd.wall_ms, with_dx ? "" : " (no dx)", bwd.wall_ms,
      fwd.wall_ms + bwd.wall_ms,
      fwd.cpu_ms, bwd.cpu_ms, fwd.cpu_ms + bwd.cpu_ms,
      total_gflop / ((fwd.cpu_ms + bwd.cpu_ms) * 1e-3));
}

void BenchLinear(int n, int in, int out, int repetitions) {
  const Context ctx;
  std::vector<float> x(static_cast<size_t>(n) * in, 0.5f), w(static_cast<size_t>(out) * in, 0.01f);
  std::vector<float> b(out, 0.1f), y(static_cast<size_t>(n) * out), dy(y.size(), 0.01f);
  std::vector<float> dx(x.size()), dw(w.size()), db(out);
  const Timing t = Median(repetitions, [&] {
    chorus::kernels::LinearForward<float>(ctx, n, in, out, x.data(), w.data(), b.data(), y.data());
    chorus::kernels::LinearBackward<float>(ctx, n, in, out, x.data(), w.data(), dy.data(),
                                           dx.data(), dw.data(), db.data());
  });
  std::printf("linear n=%d %d->%d fwd+bwd %.3f ms wall (median), %.3f ms cpu/thread (min)\n", n, in,
              out, t.wall_ms, t.cpu_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 64;
  const int repetitions = argc > 3 ? std::atoi(argv[3]) : 20;
  chorus::kernels::SetThreads(threads);
  g_threads = threads;
  std::printf("threads=%d batch=%d repetitions=%d\n", threads, batch, repetitions);

  Conv2dShape conv1;
  conv1.n = batch;
  conv1.c = 1;
  conv1.h = 28;
  conv1.w = 28;
  conv1.k = 32;
  conv1.r = 5;
  conv1.s = 5;
  conv1.pad = 2;

  Conv2dShape conv2;
  conv2.n = batch;
  conv2.c = 32;
  conv2.h = 14;
  conv2.w = 14;
  conv2.k = 64;
  conv2.r = 5;
  conv2.s = 5;
  conv2.pad = 2;
  using chorus::kernels::ConvBackend;
  for (ConvBackend backend : {ConvBackend::kAuto, ConvBackend::kIm2col}) {
    chorus::kernels::SetConvBackend(backend);
    if (backend == ConvBackend::kAuto && !chorus::kernels::ConvUsesOnednn()) continue;
    BenchConv("conv1", conv1, /*with_dx=*/false, repetitions);
    BenchConv("conv2", conv2, /*with_dx=*/true, repetitions);
  }

  BenchLinear(batch, 784, 256, repetitions);
  BenchLinear(batch, 3136, 512, repetitions);
  return 0;
}
