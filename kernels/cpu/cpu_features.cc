// CPU feature checks (see cpu_features.h).
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

namespace chorus::kernels::cpu {

bool CpuHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

bool CpuHasF16c() {
  static const bool has = [] {
    // F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c").
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    __builtin_cpu_init();
    return f16c && __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

}  // namespace chorus::kernels::cpu
