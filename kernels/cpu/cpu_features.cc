// CPU feature checks (see cpu_features.h).
#include "kernels/cpu/cpu_features.h"

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
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") != 0 && __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

}  // namespace chorus::kernels::cpu
