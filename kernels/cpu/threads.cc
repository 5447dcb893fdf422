// Thread count for OpenBLAS and the OpenMP loops of the CPU kernels.
#include <omp.h>

#include <algorithm>

#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace chorus::kernels {

void SetThreads(int threads) {
  threads = std::max(1, threads);
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

}  // namespace chorus::kernels
