// The CUDA backend's availability in a build without CUDA (CMake found no CUDA
// compiler): kernels/cuda/availability.h says so, so that "cuda:0" is a clear
// error instead of a link error. Replaced by kernels/cuda/device.cc in CUDA builds.
#include "kernels/cuda/availability.h"

namespace chorus::kernels::cuda {

bool Compiled() { return false; }

int DeviceCount(std::string* why) {
  if (why != nullptr) {
    *why = "this build of Chorus has no CUDA backend (configured with CHORUS_CUDA=OFF, or "
           "CMake found no CUDA compiler and cuDNN); rebuild where CUDA and cuDNN are "
           "installed (-DCHORUS_CUDA=ON makes their absence a configure error)";
  }
  return 0;
}

}  // namespace chorus::kernels::cuda
