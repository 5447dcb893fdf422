// GEMM and the fully connected layer on the GPU: cuBLAS (cublasGemmEx) and
// cuBLASLt, FP16 inputs, FP32 accumulation on tensor cores.
//
// Row-major over column-major. cuBLAS is column-major; a row-major matrix
// M [r, c] with leading dimension ld is, to cuBLAS, the column-major M^T [c, r]
// with the same ld. The row-major product C [m, n] = op(A) op(B) is therefore
// computed as the column-major C^T [n, m] = op(B)^T op(A)^T: B goes first,
// the "m" and "n" of cuBLAS are our n and m, and each operand keeps its own
// transpose flag (a row-major B [k, n] is already the column-major B^T).
//
// LinearForward is one cuBLASLt matmul with the BIAS epilogue: with the same
// reasoning, y^T [out, N] = w [out, in] (column-major: w^T, transposed back)
// x^T [in, N], and the bias [out] runs down the rows of the column-major D, as
// the epilogue wants; it is added in FP32 before the one rounding of y to FP16.
// The algorithm is chosen once per shape and pointer alignment and cached. If
// cuBLASLt offers no algorithm for the bias epilogue, the bias is broadcast
// into y and a GEMM adds x w^T with beta = 1 (same single rounding).
// LinearBackward is two GEMMs and a column-sum kernel (linear.cu) for db.
//
// Reductions inside a GEMM (split-K) are kept in FP32 for cuBLASLt (reduction
// scheme mask); for cublasGemmEx with an FP16 C that is the handle's math mode
// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, the device's to set).
// Nothing here allocates device memory: cuBLAS and cuBLASLt use the workspace
// of Device::Impl, so the calls can be captured into graphs.
#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {

// linear.cu
namespace linear_kernels {
Status ColumnSums(Device::Impl& impl, int rows, int cols, const Half* x, Half* sums);
Status BroadcastRows(Device::Impl& impl, int rows, int cols, const Half* row, Half* y);
Status ScaleMatrix(Device::Impl& impl, int m, int n, float beta, Half* c, int ldc);
Status ScaleMatrix(Device::Impl& impl, int m, int n, float beta, float* c, int ldc);
}  // namespace linear_kernels

namespace {

std::string Dims(int m, int n, int k) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

// Row-major C [m, n] = alpha op(A) op(B) + beta C as the column-major
// C^T = op(B)^T op(A)^T (see the file comment). c_type is CUDA_R_16F or
// CUDA_R_32F.
template <typename C>
Status GemmImpl(Device& d, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                const Half* a, int lda, const Half* b, int ldb, float beta, C* c, int ldc,
                cudaDataType_t c_type) {
  if (m < 0 || n < 0 || k < 0) return InvalidArgument("Gemm: negative size " + Dims(m, n, k));
  if (m == 0 || n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  if (k == 0) return linear_kernels::ScaleMatrix(impl, m, n, beta, c, ldc);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasStatus_t status =
      impl.blas->cublasGemmEx(impl.cublas, op_b, op_a, /*m=*/n, /*n=*/m, k, &alpha, b, CUDA_R_16F, ldb, a,
                   CUDA_R_16F, lda, &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(status, "cublasGemmEx")
        .WithContext("Gemm (row-major " + Dims(m, n, k) + " lda=" + std::to_string(lda) +
                     " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc) + ")");
  }
  return Status::Ok();
}

// ---- cuBLASLt: LinearForward with the bias epilogue ----------------------------------

// Largest power of two (at most 256, cuBLASLt's default expectation) dividing
// the address: the heuristic must only offer kernels that work at this
// alignment (a tensor inside a parameter arena need not be 256-byte aligned).
uint32_t Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// What the chosen algorithm depends on. Alignments: x, w, y, bias.
struct LtKey {
  int ordinal = 0;
  int n = 0, in = 0, out = 0;
  bool bias = false;
  std::array<uint32_t, 4> align{};
  auto operator<=>(const LtKey&) const = default;
};

struct LtChoice {
  bool have_algo = false;  // false: use the broadcast + GEMM fallback
  cublasLtMatmulAlgo_t algo{};
};

// Process-wide: a Device is driven by one thread, but several Devices (one per
// thread) may share the cache, hence the mutex. Entries are a few hundred
// bytes, one per (shape, alignment) seen.
std::mutex lt_cache_mutex;
std::map<LtKey, LtChoice>& LtCache() {
  static auto* cache = new std::map<LtKey, LtChoice>();  // never destroyed: no exit-order issues
  return *cache;
}

// The operation and layouts of y^T [out, N] = w [out, in] x^T [in, N] (+ b), in
// cuBLASLt's column-major terms (see the file comment):
//   A = w: stored [in, out] (ld in), op T  -> [out, in]
//   B = x: stored [in, N]   (ld in), op N  -> [in, N]
//   C = D = y: [out, N] (ld out); bias [out] runs down D's rows.
// The descriptors live on the stack (the *Init calls need no allocation).
struct LtForward {
  cublasLtMatmulDescOpaque_t op{};
  cublasLtMatrixLayoutOpaque_t a{}, b{}, c{};

  Status Init(const CublasApi& blas, int n, int in, int out, const Half* bias) {
    CHORUS_CUBLAS_RETURN_IF_ERROR(blas.MatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                  "cublasLtMatmulDescInit");
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    CHORUS_CUBLAS_RETURN_IF_ERROR(
        blas.cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
    CHORUS_CUBLAS_RETURN_IF_ERROR(
        blas.cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
    const uint32_t epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CHORUS_CUBLAS_RETURN_IF_ERROR(
        blas.cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof(epilogue)),
        "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    if (bias != nullptr) {
      // The bias type defaults to D's (FP16), which is what b is.
      const void* bias_pointer = bias;
      CHORUS_CUBLAS_RETURN_IF_ERROR(
          blas.cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                         sizeof(bias_pointer)),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    }
    CHORUS_CUBLAS_RETURN_IF_ERROR(blas.MatrixLayoutInit(&a, CUDA_R_16F, in, out, in),
                                  "cublasLtMatrixLayoutInit(w)");
    CHORUS_CUBLAS_RETURN_IF_ERROR(blas.MatrixLayoutInit(&b, CUDA_R_16F, in, n, in),
                                  "cublasLtMatrixLayoutInit(x)");
    CHORUS_CUBLAS_RETURN_IF_ERROR(blas.MatrixLayoutInit(&c, CUDA_R_16F, out, n, out),
                                  "cublasLtMatrixLayoutInit(y)");
    return Status::Ok();
  }
};

// The cached choice for key, asking the heuristic the first time.
Result<LtChoice> ForwardAlgo(Device::Impl& impl, LtForward& desc, const LtKey& key) {
  std::lock_guard<std::mutex> lock(lt_cache_mutex);
  auto& cache = LtCache();
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  cublasLtMatmulPreferenceOpaque_t pref{};
  CHORUS_CUBLAS_RETURN_IF_ERROR(impl.blas->MatmulPreferenceInit(&pref),
                                "cublasLtMatmulPreferenceInit");
  const uint64_t workspace = impl.blas_workspace_bytes;
  CHORUS_CUBLAS_RETURN_IF_ERROR(
      impl.blas->cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof(workspace)),
      "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  // Split-K partial sums stay in FP32 (no intermediate rounding to FP16):
  // each output is rounded once, as the CPU model does.
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CHORUS_CUBLAS_RETURN_IF_ERROR(
      impl.blas->cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                           &reduction, sizeof(reduction)),
      "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
  // A = w, B = x, C = D = y.
  const uint32_t align_a = key.align[1], align_b = key.align[0], align_cd = key.align[2];
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd}};
  for (const auto& [attr, value] : aligns) {
    CHORUS_CUBLAS_RETURN_IF_ERROR(
        impl.blas->cublasLtMatmulPreferenceSetAttribute(&pref, attr, value, sizeof(*value)),
        "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  }

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = impl.blas->cublasLtMatmulAlgoGetHeuristic(
      impl.cublas_lt, &desc.op, &desc.a, &desc.b, &desc.c, &desc.c, &pref, 1, &result, &returned);
  LtChoice choice;
  if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    choice.have_algo = true;
    choice.algo = result.algo;
  } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
    return Err(CublasStatus(status, "cublasLtMatmulAlgoGetHeuristic")
                   .WithContext("LinearForward n=" + std::to_string(key.n) +
                                " in=" + std::to_string(key.in) +
                                " out=" + std::to_string(key.out)));
  }
  cache.emplace(key, choice);
  return choice;
}

}  // namespace

Status Gemm(Device& d, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const Half* a,
            int lda, const Half* b, int ldb, float beta, Half* c, int ldc) {
  return GemmImpl(d, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, CUDA_R_16F);
}

Status Gemm(Device& d, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const Half* a,
            int lda, const Half* b, int ldb, float beta, float* c, int ldc) {
  return GemmImpl(d, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, CUDA_R_32F);
}

Status LinearForward(Device& d, int n, int in, int out, const Half* x, const Half* w, const Half* b,
                     Half* y) {
  if (n < 0 || in < 0 || out < 0) {
    return InvalidArgument("LinearForward: negative size n=" + std::to_string(n) +
                           " in=" + std::to_string(in) + " out=" + std::to_string(out));
  }
  if (n == 0 || out == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  // No inputs: y is the bias alone (a GEMM would need k >= 1).
  if (in == 0) return linear_kernels::BroadcastRows(impl, n, out, b, y);

  LtForward desc;
  CHORUS_RETURN_IF_ERROR(desc.Init(*impl.blas, n, in, out, b));
  LtKey key;
  key.ordinal = impl.ordinal;
  key.n = n;
  key.in = in;
  key.out = out;
  key.bias = b != nullptr;
  key.align = {Alignment(x), Alignment(w), Alignment(y), b != nullptr ? Alignment(b) : 256u};
  CHORUS_ASSIGN_OR_RETURN(const LtChoice choice, ForwardAlgo(impl, desc, key));

  if (!choice.have_algo) {
    // y = broadcast b, then y += x [n, in] w^T [in, out] (beta = 1 adds the
    // FP16 bias in FP32 before the single rounding).
    CHORUS_RETURN_IF_ERROR(linear_kernels::BroadcastRows(impl, n, out, b, y));
    return Gemm(d, false, true, n, out, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y,
                out);
  }
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: C (= y) is not read
  const cublasStatus_t status =
      impl.blas->cublasLtMatmul(impl.cublas_lt, &desc.op, &alpha, w, &desc.a, x, &desc.b, &beta, y, &desc.c,
                     y, &desc.c, &choice.algo, impl.blas_workspace, impl.blas_workspace_bytes,
                     impl.stream);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(status, "cublasLtMatmul")
        .WithContext("LinearForward n=" + std::to_string(n) + " in=" + std::to_string(in) +
                     " out=" + std::to_string(out));
  }
  return Status::Ok();
}

Status LinearBackward(Device& d, int n, int in, int out, const Half* x, const Half* w,
                      const Half* dy, Half* dx, Half* dw, Half* db) {
  if (n < 0 || in < 0 || out < 0) {
    return InvalidArgument("LinearBackward: negative size n=" + std::to_string(n) +
                           " in=" + std::to_string(in) + " out=" + std::to_string(out));
  }
  // dw [out, in] = dy^T [out, N] x [N, in]  (N == 0: zeros)
  CHORUS_RETURN_IF_ERROR(Gemm(d, true, false, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in));
  // dx [N, in] = dy [N, out] w [out, in]
  if (dx != nullptr) {
    CHORUS_RETURN_IF_ERROR(Gemm(d, false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in));
  }
  // db [out] = column sums of dy [N, out]
  if (db != nullptr) CHORUS_RETURN_IF_ERROR(linear_kernels::ColumnSums(d.impl(), n, out, dy, db));
  return Status::Ok();
}

}  // namespace chorus::kernels::cuda
