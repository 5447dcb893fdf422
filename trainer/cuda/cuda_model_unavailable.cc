// CreateCudaModel in a build without the CUDA backend: the error says why, so
// that `device = "cuda:0"` fails clearly at start. cuda_model.cc replaces this
// file in CUDA builds (trainer/CMakeLists.txt).
#include <string>

#include "kernels/cuda/availability.h"
#include "trainer/device_model.h"

namespace chorus::trainer {

Result<std::unique_ptr<DeviceModel>> CreateCudaModel(const Model& /*model*/,
                                                     const DeviceModelOptions& options) {
  std::string why;
  kernels::cuda::DeviceCount(&why);
  return Err(Unavailable("device cuda:" + std::to_string(options.ordinal) + ": " + why));
}

}  // namespace chorus::trainer
