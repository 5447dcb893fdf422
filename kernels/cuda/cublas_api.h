// cuBLAS and cuBLASLt, opened on first use (dlopen) instead of linked. Their
// load-time initialisation costs every process that links them about 0.4 s of
// CPU and 210 MB of touched memory before main(), which each CPU-only node,
// launcher and test process paid (docs/testing.md). Internal to kernels/cuda/.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "common/status.h"

// The functions this backend calls, by their public names (the _v2 macros of
// cublas_v2.h apply, so each entry is the symbol the library exports).
#define CHORUS_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate)                  \
  X(cublasDestroy)                 \
  X(cublasSetStream)               \
  X(cublasSetWorkspace)            \
  X(cublasSetMathMode)             \
  X(cublasGetStatusName)           \
  X(cublasGetStatusString)
#define CHORUS_CUBLASLT_FUNCTIONS(X)       \
  X(cublasLtCreate)                        \
  X(cublasLtDestroy)                       \
  X(cublasLtMatmul)                        \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulDescInit_internal)       \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatmulPreferenceInit_internal) \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatrixLayoutInit_internal)

namespace chorus::kernels::cuda {

struct CublasApi {
#define CHORUS_CUBLAS_POINTER(name) decltype(&::name) name = nullptr;
  CHORUS_CUBLAS_FUNCTIONS(CHORUS_CUBLAS_POINTER)
  CHORUS_CUBLASLT_FUNCTIONS(CHORUS_CUBLAS_POINTER)
#undef CHORUS_CUBLAS_POINTER
  // The C function; C++ also sees an inline overload with a cudaDataType
  // compute type, so decltype cannot name it.
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                 int, const void*, const void*, cudaDataType, int, const void*,
                                 cudaDataType, int, const void*, void*, cudaDataType, int,
                                 cublasComputeType_t, cublasGemmAlgo_t) = nullptr;

  // cublasLt.h's inline wrappers, which pass the opaque structures' sizes.
  cublasStatus_t MatmulDescInit(cublasLtMatmulDesc_t desc, cublasComputeType_t compute,
                                cudaDataType_t scale) const {
    return cublasLtMatmulDescInit_internal(desc, sizeof(*desc), compute, scale);
  }
  cublasStatus_t MatmulPreferenceInit(cublasLtMatmulPreference_t pref) const {
    return cublasLtMatmulPreferenceInit_internal(pref, sizeof(*pref));
  }
  cublasStatus_t MatrixLayoutInit(cublasLtMatrixLayout_t layout, cudaDataType type, uint64_t rows,
                                  uint64_t cols, int64_t ld) const {
    return cublasLtMatrixLayoutInit_internal(layout, sizeof(*layout), type, rows, cols, ld);
  }
};

// Opens both libraries once (thread-safe) and returns their functions, or an
// Unavailable error that names the library or symbol that was not found.
Result<const CublasApi*> Cublas();

}  // namespace chorus::kernels::cuda
