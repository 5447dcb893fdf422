// Run-time CPU feature checks shared by the kernels that carry their own
// vector code (internal to kernels/cpu). Each is computed once.
#pragma once

namespace chorus::kernels::cpu {

// AVX-512 Foundation (16-lane float vectors).
bool CpuHasAvx512();
// F16C and AVX2 (8-lane FP16 <-> FP32 conversion).
bool CpuHasF16c();

}  // namespace chorus::kernels::cpu
