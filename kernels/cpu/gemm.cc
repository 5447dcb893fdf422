// CPU GEMM (OpenBLAS) and the fully connected layer built on it.
//
// Gemm is a row-major wrapper over cblas_sgemm / cblas_dgemm. All CPU kernels
// share one thread pool, OpenMP's: OpenBLAS runs single-threaded (see
// threads.cc) and Gemm splits C into column (or row) blocks, one
// single-threaded BLAS call per OpenMP thread. Two pools on two cores (OpenMP
// workers spinning while OpenBLAS threads wait for a core, and back) made the
// convolution several times slower. Called inside a parallel region (the
// per-image GEMMs of conv2d.cc), or too small for a region to pay off, Gemm
// runs the same blocks on the calling thread.
// LinearForward / LinearBackward are three GEMMs and a bias reduction.
// Nothing here allocates; nothing here knows about layers or models.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#if CHORUS_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);

namespace chorus::kernels {
namespace {

// Below cpu::ParallelMin(this many) flops (2*m*n*k) one thread does the whole
// GEMM: about 18 us of one AVX-512 core, 9 regions' cost where a region costs
// 2 us. The measured scale matters: in a 2-vCPU virtual machine (35-50 us a
// region) the fixed 2 Mflop threshold this replaced made 2 threads slower than
// one on the MLP (docs/performance.md).
constexpr size_t kParallelFlops = size_t{1} << 22;
// Column / row blocks handed to threads are multiples of this (the SIMD
// kernels of OpenBLAS work on 16-wide panels).
constexpr int kBlockAlign = 16;

std::atomic<GemmBackend> gemm_backend{GemmBackend::kAuto};

void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
              const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
#if CHORUS_HAVE_ONEDNN
  if (GemmUsesOnednn()) {
    // Row-major like cblas_sgemm's CblasRowMajor. Called on one thread (a block
    // of the split below, or a GEMM too small to split): oneDNN would otherwise
    // start a parallel region of its own.
    const int saved = omp_in_parallel() ? 0 : omp_get_max_threads();
    if (saved > 1) omp_set_num_threads(1);
    const dnnl_status_t status = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N',
                                            m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (saved > 1) omp_set_num_threads(saved);
    if (status == dnnl_success) return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
              const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void SetGemmBackend(GemmBackend backend) { gemm_backend.store(backend, std::memory_order_relaxed); }

bool GemmUsesOnednn() {
  return CHORUS_HAVE_ONEDNN && gemm_backend.load(std::memory_order_relaxed) == GemmBackend::kAuto;
}

std::string GemmDescription() {
#if CHORUS_HAVE_ONEDNN
  if (GemmUsesOnednn()) {
    const dnnl_version_t* v = dnnl_version();
    const char* isa = "sse41";
    switch (dnnl_get_effective_cpu_isa()) {
      case dnnl_cpu_isa_avx: isa = "avx"; break;
      case dnnl_cpu_isa_avx2: isa = "avx2"; break;
      case dnnl_cpu_isa_avx2_vnni: isa = "avx2_vnni"; break;
      case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
      case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
      case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
      case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
      default: break;
    }
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " sgemm, " + isa;
  }
#endif
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": the core
  // it runs on is in there (OPENBLAS_CORETYPE chooses it under DYNAMIC_ARCH).
  return openblas_get_config();
}

template <typename T>
void Gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a,
          int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // Empty inner dimension: C = beta * C (BLAS rejects lda < 1 here).
    for (int i = 0; i < m; ++i) {
      T* row = c + static_cast<size_t>(i) * ldc;
      if (beta == T(0)) {
        std::fill(row, row + n, T(0));
      } else {
        for (int j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  // OpenBLAS must not start its own threads, whoever calls first (see header).
  static const bool single_threaded_blas = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)single_threaded_blas;
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  // The blocks depend on the shape and KernelThreads() only, never on whether
  // they run in parallel: a block's bits can differ from the whole GEMM's
  // (oneDNN picks its K blocking from M and N), and whether to go parallel
  // follows a measured cost (cpu::ParallelMin), so a run must not depend on it.
  const double flops = 2.0 * m * n * k;
  const bool split_cols = n >= m;
  const int extent = split_cols ? n : m;
  const int parts = std::min(cpu::KernelThreads(), (extent + kBlockAlign - 1) / kBlockAlign);
  if (parts <= 1) {
    BlasGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Blocks of C: columns [j0, j1) use columns j0.. of op(B); rows [i0, i1) use
  // rows i0.. of op(A).
  const int per_part = (extent + parts - 1) / parts;
  const int block = (per_part + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  const auto run_block = [&](int part) {
    const int begin = std::min(extent, part * block);
    const int end = std::min(extent, begin + block);
    if (begin >= end) return;
    if (split_cols) {
      const T* b_part = trans_b ? b + static_cast<size_t>(begin) * ldb : b + begin;
      BlasGemm(ta, tb, m, end - begin, k, alpha, a, lda, b_part, ldb, beta, c + begin, ldc);
    } else {
      const T* a_part = trans_a ? a + begin : a + static_cast<size_t>(begin) * lda;
      BlasGemm(ta, tb, end - begin, n, k, alpha, a_part, lda, b, ldb, beta,
               c + static_cast<size_t>(begin) * ldc, ldc);
    }
  };
  if (omp_in_parallel() || flops < static_cast<double>(cpu::ParallelMin(kParallelFlops))) {
    for (int part = 0; part < parts; ++part) run_block(part);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(parts)
  for (int part = 0; part < parts; ++part) run_block(part);
}

template <typename T>
void LinearForward(const Context& ctx, int n, int in, int out, const T* x, const T* w, const T* b,
                   T* y) {
  // y [n, out] starts as the broadcast bias, then y += x [n, in] * w^T [in, out].
  T beta = T(0);
  if (b != nullptr) {
    for (int i = 0; i < n; ++i) std::memcpy(y + static_cast<size_t>(i) * out, b, sizeof(T) * out);
    beta = T(1);
  }
  Gemm<T>(ctx, false, true, n, out, in, T(1), x, in, w, in, beta, y, out);
}

template <typename T>
void LinearBackward(const Context& ctx, int n, int in, int out, const T* x, const T* w, const T* dy,
                    T* dx, T* dw, T* db) {
  // dw [out, in] = dy^T [out, n] * x [n, in]
  Gemm<T>(ctx, true, false, out, in, n, T(1), dy, out, x, in, T(0), dw, in);
  // dx [n, in] = dy [n, out] * w [out, in]
  if (dx != nullptr) Gemm<T>(ctx, false, false, n, in, out, T(1), dy, out, w, in, T(0), dx, in);
  // db [out] = column sums of dy; row by row so the inner loop is contiguous.
  if (db != nullptr) {
    std::fill(db, db + out, T(0));
    for (int i = 0; i < n; ++i) {
      const T* row = dy + static_cast<size_t>(i) * out;
      for (int j = 0; j < out; ++j) db[j] += row[j];
    }
  }
}

#define CHORUS_INSTANTIATE_GEMM(T)                                                                 \
  template void Gemm<T>(const Context&, bool, bool, int, int, int, T, const T*, int, const T*,     \
                        int, T, T*, int);                                                          \
  template void LinearForward<T>(const Context&, int, int, int, const T*, const T*, const T*, T*); \
  template void LinearBackward<T>(const Context&, int, int, int, const T*, const T*, const T*, T*, \
                                  T*, T*);
CHORUS_INSTANTIATE_GEMM(float)
CHORUS_INSTANTIATE_GEMM(double)
#undef CHORUS_INSTANTIATE_GEMM

}  // namespace chorus::kernels
