// F16C/AVX2 FP16 <-> FP32 conversion loops (kernels/cpu/fp16_f16c.cc, compiled
// with -mf16c -mavx2 -mfma). Internal to kernels/cpu: call them only after the
// run-time CPU check in fp16.cc; they must not be reached on CPUs without F16C.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::kernels::cpu {

void F16cHalfToFloat(const uint16_t* in, float* out, size_t count);
void F16cFloatToHalf(const float* in, uint16_t* out, size_t count);
void F16cRoundToHalf(float* x, size_t count);

}  // namespace chorus::kernels::cpu
