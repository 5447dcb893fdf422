// Whether this build has the CUDA backend and how many GPUs the driver sees.
// Always built (kernels/cuda/availability_unavailable.cc when CMake found no CUDA), so
// callers can say clearly why "cuda:0" cannot be used. Plain C++.
#pragma once

#include <string>

namespace chorus::kernels::cuda {

// True when this build has the CUDA backend compiled in.
bool Compiled();

// GPUs the CUDA driver reports; 0 when the backend is not compiled in, the
// driver is missing or no GPU is present, with the reason in *why.
int DeviceCount(std::string* why = nullptr);

}  // namespace chorus::kernels::cuda
