// F16C/AVX2 FP16 <-> FP32 conversion loops (kernels/cpu/fp16_f16c.cc, compiled
// with -mf16c -mavx2 -mfma). Internal to kernels/cpu: call them only after the
// run-time CPU check in fp16.cc; they must not be reached on CPUs without F16C.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::kernels::cpu {

void F16cHalfToFloat(const uint16_t* in, float* out, size_t count);
void F16cFloatToHalf(const float* in, uint16_t* out, size_t count);
void F16cRoundToHalf(const float* in, float* out, size_t count);  // in == out allowed
// x = float(half(x)) * scale (one IEEE multiply, not fused with anything).
void F16cRoundToHalfScaled(float* x, size_t count, float scale);
// bits = half(in); out = float(bits) (out may equal in).
void F16cRoundToHalfKeepBits(const float* in, float* out, uint16_t* bits, size_t count);
// acc = half(float(acc) + float(in)).
void F16cAddHalves(uint16_t* acc, const uint16_t* in, size_t count);
// The same with 16-lane AVX-512 main loops; only on CPUs with AVX-512F.
void Avx512HalfToFloat(const uint16_t* in, float* out, size_t count);
void Avx512FloatToHalf(const float* in, uint16_t* out, size_t count);
void Avx512RoundToHalf(const float* in, float* out, size_t count);
void Avx512RoundToHalfScaled(float* x, size_t count, float scale);
void Avx512RoundToHalfKeepBits(const float* in, float* out, uint16_t* bits, size_t count);
void Avx512AddHalves(uint16_t* acc, const uint16_t* in, size_t count);

}  // namespace chorus::kernels::cpu
