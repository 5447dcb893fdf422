// FP16 <-> FP32 array conversion with run-time dispatch: the F16C/AVX2 loops in
// fp16_f16c.cc when the CPU has both features (checked once), otherwise the
// portable scalar reference in common/fp16.h. Both round to nearest even and
// agree bit for bit on every non-NaN input; NaN stays NaN on both (F16C also
// sets the quiet bit when widening a signalling half NaN, the scalar code keeps
// the payload as is). Large arrays are split over OpenMP threads in blocks.
// This file must not use AVX2 itself: it runs on any x86-64.
#include "common/fp16.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/fp16_f16c.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Arrays at least this long are converted by several threads, kBlockElems at a time.
constexpr size_t kParallelElems = size_t{1} << 18;
constexpr size_t kBlockElems = size_t{1} << 14;

std::atomic<HalfConversion> limit{HalfConversion::kBest};

bool CpuHasF16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  }();
  return has;
}

bool CpuHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

bool UseF16c() {
  return limit.load(std::memory_order_relaxed) != HalfConversion::kPortable && CpuHasF16c();
}
bool UseAvx512() {
  return limit.load(std::memory_order_relaxed) == HalfConversion::kBest && UseF16c() &&
         CpuHasAvx512();
}

// Calls fn(begin, length) over [0, count), in parallel blocks when count is large.
template <typename Fn>
void ForBlocks(size_t count, Fn fn) {
  if (count < kParallelElems) {
    fn(size_t{0}, count);
    return;
  }
  const size_t blocks = (count + kBlockElems - 1) / kBlockElems;
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static)
  for (size_t block = 0; block < blocks; ++block) {
    const size_t begin = block * kBlockElems;
    fn(begin, std::min(kBlockElems, count - begin));
  }
}

}  // namespace

void HalfToFloat(const uint16_t* in, float* out, size_t count) {
  if (UseF16c()) {
    const auto convert = UseAvx512() ? cpu::Avx512HalfToFloat : cpu::F16cHalfToFloat;
    ForBlocks(count, [&](size_t begin, size_t len) { convert(in + begin, out + begin, len); });
    return;
  }
  ForBlocks(count, [&](size_t begin, size_t len) {
    for (size_t i = begin; i < begin + len; ++i) out[i] = HalfBitsToFloat(in[i]);
  });
}

void FloatToHalf(const float* in, uint16_t* out, size_t count) {
  if (UseF16c()) {
    const auto convert = UseAvx512() ? cpu::Avx512FloatToHalf : cpu::F16cFloatToHalf;
    ForBlocks(count, [&](size_t begin, size_t len) { convert(in + begin, out + begin, len); });
    return;
  }
  ForBlocks(count, [&](size_t begin, size_t len) {
    for (size_t i = begin; i < begin + len; ++i) out[i] = FloatToHalfBits(in[i]);
  });
}

void RoundToHalf(const float* in, float* out, size_t count) {
  if (UseF16c()) {
    const auto convert = UseAvx512() ? cpu::Avx512RoundToHalf : cpu::F16cRoundToHalf;
    ForBlocks(count, [&](size_t begin, size_t len) { convert(in + begin, out + begin, len); });
    return;
  }
  ForBlocks(count, [&](size_t begin, size_t len) {
    for (size_t i = begin; i < begin + len; ++i) out[i] = HalfBitsToFloat(FloatToHalfBits(in[i]));
  });
}

void RoundToHalf(float* x, size_t count) { RoundToHalf(x, x, count); }

const char* HalfConversionPath() {
  return UseAvx512() ? "avx512" : UseF16c() ? "f16c" : "portable";
}

void LimitHalfConversion(HalfConversion path) { limit.store(path, std::memory_order_relaxed); }

}  // namespace chorus::kernels
