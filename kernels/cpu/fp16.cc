// FP16 <-> FP32 array conversion with run-time dispatch: the AVX-512 or F16C/AVX2
// loops in fp16_f16c.cc when the CPU has them (checked once), otherwise the
// portable scalar reference in common/fp16.h. Both round to nearest even and
// agree bit for bit on every non-NaN input; NaN stays NaN on both (F16C also
// sets the quiet bit when widening a signalling half NaN, the scalar code keeps
// the payload as is). Large arrays are split over the kernels' threads.
// This file must not use AVX2 itself: it runs on any x86-64.
#include "common/fp16.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp16_f16c.h"
#include "kernels/cpu/for_each_block.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Arrays at least this long are converted by several threads: from about here
// one core's conversion costs far more than a fork-join (docs/performance.md,
// "Single-node training against PyTorch").
constexpr size_t kParallelElems = size_t{1} << 16;

std::atomic<HalfConversion> limit{HalfConversion::kBest};

bool UseF16c() {
  return limit.load(std::memory_order_relaxed) != HalfConversion::kPortable && cpu::CpuHasF16c();
}
bool UseAvx512() {
  return limit.load(std::memory_order_relaxed) == HalfConversion::kBest && UseF16c() &&
         cpu::CpuHasAvx512();
}

// Runs block(fast, begin, end) over [0, count), split over the kernels'
// threads for long arrays, where `fast` is the vector loop in use (avx512 or
// f16c: the same bits) or nullptr for the portable scalar code.
template <typename Fn, typename Block>
void Dispatch(size_t count, Fn* avx512, Fn* f16c, const Block& block) {
  Fn* const fast = UseF16c() ? (UseAvx512() ? avx512 : f16c) : nullptr;
  cpu::ForEachBlock(count, kParallelElems,
                    [&](size_t begin, size_t end) { block(fast, begin, end); });
}

// out[i] = scalar(in[i]) on the path Dispatch picks.
template <typename In, typename Out, typename Scalar>
void Convert(const In* in, Out* out, size_t count, void (*avx512)(const In*, Out*, size_t),
             void (*f16c)(const In*, Out*, size_t), Scalar scalar) {
  Dispatch(count, avx512, f16c, [&](auto* fast, size_t begin, size_t end) {
    if (fast != nullptr) return fast(in + begin, out + begin, end - begin);
    for (size_t i = begin; i < end; ++i) out[i] = scalar(in[i]);
  });
}

}  // namespace

void HalfToFloat(const uint16_t* in, float* out, size_t count) {
  Convert(in, out, count, cpu::Avx512HalfToFloat, cpu::F16cHalfToFloat,
          [](uint16_t h) { return HalfBitsToFloat(h); });
}

void FloatToHalf(const float* in, uint16_t* out, size_t count) {
  Convert(in, out, count, cpu::Avx512FloatToHalf, cpu::F16cFloatToHalf,
          [](float f) { return FloatToHalfBits(f); });
}

void RoundToHalf(const float* in, float* out, size_t count) {
  Convert(in, out, count, cpu::Avx512RoundToHalf, cpu::F16cRoundToHalf,
          [](float f) { return HalfBitsToFloat(FloatToHalfBits(f)); });
}

void RoundToHalf(float* x, size_t count) { RoundToHalf(x, x, count); }

void AddHalves(uint16_t* acc, const uint16_t* in, size_t count) {
  // On the calling thread whatever the length (no Dispatch): collectives call
  // it while training may be using the kernels' threads.
  if (UseAvx512()) return cpu::Avx512AddHalves(acc, in, count);
  if (UseF16c()) return cpu::F16cAddHalves(acc, in, count);
  for (size_t i = 0; i < count; ++i) {
    acc[i] = FloatToHalfBits(HalfBitsToFloat(acc[i]) + HalfBitsToFloat(in[i]));
  }
}

void RoundToHalfScaled(float* x, size_t count, float scale) {
  Dispatch(count, cpu::Avx512RoundToHalfScaled, cpu::F16cRoundToHalfScaled,
           [&](auto* fast, size_t begin, size_t end) {
             if (fast != nullptr) return fast(x + begin, end - begin, scale);
             for (size_t i = begin; i < end; ++i) {
               x[i] = HalfBitsToFloat(FloatToHalfBits(x[i])) * scale;
             }
           });
}

void RoundToHalfKeepBits(const float* in, float* out, uint16_t* bits, size_t count) {
  Dispatch(count, cpu::Avx512RoundToHalfKeepBits, cpu::F16cRoundToHalfKeepBits,
           [&](auto* fast, size_t begin, size_t end) {
             if (fast != nullptr) return fast(in + begin, out + begin, bits + begin, end - begin);
             for (size_t i = begin; i < end; ++i) {
               bits[i] = FloatToHalfBits(in[i]);
               out[i] = HalfBitsToFloat(bits[i]);
             }
           });
}

const char* HalfConversionPath() {
  return UseAvx512() ? "avx512" : UseF16c() ? "f16c" : "portable";
}

void LimitHalfConversion(HalfConversion path) { limit.store(path, std::memory_order_relaxed); }

}  // namespace chorus::kernels
