// Internal to kernels/cuda/: CUDA headers, Device::Impl, error mapping and
// launch helpers. Must not be included outside kernels/cuda/ (and its tests).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "common/status.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/device.h"

namespace chorus::kernels::cuda {

struct Device::Impl {
  int ordinal = 0;
  int compute_capability = 0;
  int sm_count = 0;
  std::string description;
  cudaStream_t stream = nullptr;
  const CublasApi* blas = nullptr;  // set before the handles below
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  // cuBLAS / cuBLASLt workspace, set once so that no call allocates (a CUDA
  // graph capture forbids allocation).
  void* blas_workspace = nullptr;
  size_t blas_workspace_bytes = 0;
  bool capturing = false;
};

// Status from a CUDA runtime / cuBLAS / cuDNN return code, naming `what`.
Status CudaStatus(cudaError_t err, const char* what);
Status CublasStatus(cublasStatus_t err, const char* what);
Status CudnnStatus(cudnnStatus_t err, const char* what);
// The launch status of the last kernel (cudaGetLastError), naming `what`.
Status LaunchStatus(const char* what);

inline __half* AsHalf(Half* p) { return reinterpret_cast<__half*>(p); }
inline const __half* AsHalf(const Half* p) { return reinterpret_cast<const __half*>(p); }

// Blocks of `threads` covering `count` elements, capped at a grid that fills
// the device a few times over (kernels use grid-stride loops).
inline unsigned GridFor(const Device::Impl& impl, size_t count, unsigned threads) {
  const size_t blocks = (count + threads - 1) / threads;
  const size_t cap = static_cast<size_t>(impl.sm_count > 0 ? impl.sm_count : 80) * 8;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < cap ? blocks : cap));
}

}  // namespace chorus::kernels::cuda

#define CHORUS_CUDA_RETURN_IF_ERROR(expr, what) \
  CHORUS_RETURN_IF_ERROR(::chorus::kernels::cuda::CudaStatus((expr), (what)))
#define CHORUS_CUBLAS_RETURN_IF_ERROR(expr, what) \
  CHORUS_RETURN_IF_ERROR(::chorus::kernels::cuda::CublasStatus((expr), (what)))
#define CHORUS_CUDNN_RETURN_IF_ERROR(expr, what) \
  CHORUS_RETURN_IF_ERROR(::chorus::kernels::cuda::CudnnStatus((expr), (what)))
