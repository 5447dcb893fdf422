// Device-side FP16 <-> FP32 with common/fp16.h's exact bits: the hardware
// conversions round to nearest even exactly as the CPU does for every non-NaN
// value; NaN needs the CPU's mapping (quiet bit set, sign and top payload bits
// kept). Shared by the .cu files of kernels/cuda/ (never use --use_fast_math).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace chorus::kernels::cuda::half_bits {

__device__ __forceinline__ uint16_t F2H(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float H2F(uint16_t h) {
  if ((h & 0x7fffu) > 0x7c00u) {
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

}  // namespace chorus::kernels::cuda::half_bits
