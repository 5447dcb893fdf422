// kernels/: compute ops declared once (this header); cpu/ and, optionally, cuda/.
//
// Compute ops, declared once. Each op is a function template over the scalar
// type T (float for training; double for the FP64 finite-difference gradient
// checks in tests). The CPU implementation (kernels/cpu/) is always built and is
// the reference; a CUDA backend (kernels/cuda/, optional) implements the same
// signatures for float. Callers never #ifdef on the backend.
//
// Layout conventions: activations are NCHW, row-major and contiguous; a fully
// connected weight is [out, in] (as PyTorch's nn.Linear). Every op writes its
// outputs fully (no accumulation into outputs) unless it says "accumulates".
// Ops take a Context for the thread count; they never allocate per call except
// through the caller-provided workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace chorus::kernels {

struct Context {
  int threads = 1;  // intra-op parallelism (OpenBLAS + our own loops)
};

// Sets the process-wide thread count for OpenBLAS and the OpenMP loops.
void SetThreads(int threads);
// The count SetThreads set (OpenMP's default before any call), for callers
// that run their own OpenMP loops on the same pool (the optimizer).
int Threads();
// Threads() for a loop of elements whose parallel version pays off from
// parallel_min elements where a parallel region costs about 2 us, else 1: the
// size scales with the measured cost of a region on this machine.
int ThreadsFor(size_t elements, size_t parallel_min);
// The measured cost of one parallel region of Threads() threads (0 for one),
// which those sizes scale with; measured on first use.
double ParallelRegionSeconds();

// ---- BLAS ------------------------------------------------------------------

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major. op(A) is [M,K]: A is
// [M,K] (lda >= K) or, when trans_a, [K,M] (lda >= M). Likewise B.
template <typename T>
void Gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha,
          const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc);

// ---- Fully connected ---------------------------------------------------------

// x [N, in], w [out, in], b [out] -> y [N, out] = x w^T + b
template <typename T>
void LinearForward(const Context& ctx, int n, int in, int out, const T* x, const T* w, const T* b,
                   T* y);
// dy [N, out] -> dx [N, in] (skipped when dx == nullptr), dw [out, in], db [out].
template <typename T>
void LinearBackward(const Context& ctx, int n, int in, int out, const T* x, const T* w,
                    const T* dy, T* dx, T* dw, T* db);

// ---- Convolution -------------------------------------------------------------

struct Conv2dShape {
  int n = 1, c = 1, h = 1, w = 1;  // input
  int k = 1, r = 1, s = 1;         // filters [K, C, R, S]
  int pad = 0, stride = 1;
  int OutH() const { return (h + 2 * pad - r) / stride + 1; }
  int OutW() const { return (w + 2 * pad - s) / stride + 1; }
  // Scratch floats (of T) the forward and backward passes need.
  size_t WorkspaceElems() const;
  bool operator==(const Conv2dShape&) const = default;
};

// Which implementation float GEMMs (and so the fully connected layers) use.
// kAuto: oneDNN's sgemm when this build has oneDNN: its JIT kernels use the
// widest vector ISA the CPU has (AVX-512 where present), whatever OpenBLAS was
// built or told (OPENBLAS_CORETYPE) to use. kBlas: OpenBLAS. Double GEMMs are
// always OpenBLAS. Both write the same results up to rounding; process-wide.
enum class GemmBackend { kAuto, kBlas };
void SetGemmBackend(GemmBackend backend);
// Whether float GEMMs go to oneDNN now.
bool GemmUsesOnednn();
// What float GEMMs run on now, with the vector ISA or BLAS core, for logs and
// benchmarks: "oneDNN 2.6.3 sgemm, avx512_core_bf16".
std::string GemmDescription();

// Which implementation float convolutions use. kAuto: oneDNN's JIT kernels
// when this build has oneDNN (CMake option CHORUS_ONEDNN), else im2col.
// kIm2col: im2col + OpenBLAS GEMM, the reference (and the only one for double).
// Both write the same outputs up to rounding; process-wide.
enum class ConvBackend { kAuto, kIm2col };
void SetConvBackend(ConvBackend backend);
// Whether float convolutions go to oneDNN now.
bool ConvUsesOnednn();

// x [N,C,H,W], w [K,C,R,S], b [K] -> y [N,K,P,Q]. workspace: shape.WorkspaceElems().
template <typename T>
void Conv2dForward(const Context& ctx, const Conv2dShape& shape, const T* x, const T* w,
                   const T* b, T* y, T* workspace);
// dy [N,K,P,Q] -> dx [N,C,H,W] (skipped when nullptr), dw [K,C,R,S], db [K].
template <typename T>
void Conv2dBackward(const Context& ctx, const Conv2dShape& shape, const T* x, const T* w,
                    const T* dy, T* dx, T* dw, T* db, T* workspace);

// ---- Pooling, activation -------------------------------------------------------

// Max-pool with a square window `size` and stride `size` (no padding); H and W
// must be divisible by size. x [N,C,H,W] -> y [N,C,H/size,W/size]; argmax holds
// the flat input index of each output's maximum (first one on ties).
// relu: ReLU fused in front, y = ReLU(max) = max(ReLU(x)) (the two commute,
// and pooling first touches a quarter of the values); argmax is -1 where y is
// not positive, so backward routes no gradient there, exactly as ReLU's would.
template <typename T>
void MaxPoolForward(const Context& ctx, int n, int c, int h, int w, int size, const T* x, T* y,
                    int32_t* argmax, bool relu = false);
// dy [N,C,H/size,W/size] -> dx [N,C,H,W] (fully written; argmax -1: no gradient).
template <typename T>
void MaxPoolBackward(const Context& ctx, int n, int c, int h, int w, int size, const T* dy,
                     const int32_t* argmax, T* dx);

template <typename T>
void ReluForward(const Context& ctx, size_t count, const T* x, T* y);
// dx = dy * (y > 0). Uses the forward output y (works in place: dx may alias dy).
template <typename T>
void ReluBackward(const Context& ctx, size_t count, const T* y, const T* dy, T* dx);

// ---- Batch normalisation (per channel over N, H, W) ------------------------------

struct BatchNormShape {
  int n = 1, c = 1, hw = 1;  // x is [N, C, HW]
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
};

// Training: normalises with batch statistics, writes save_mean [C] and
// save_inv_std [C] for backward, and updates running_mean/var [C] (unbiased var).
template <typename T>
void BatchNormForwardTrain(const Context& ctx, const BatchNormShape& shape, const T* x,
                           const T* gamma, const T* beta, T* y, T* save_mean, T* save_inv_std,
                           T* running_mean, T* running_var);
// Evaluation: normalises with the running statistics.
template <typename T>
void BatchNormForwardEval(const Context& ctx, const BatchNormShape& shape, const T* x,
                          const T* gamma, const T* beta, const T* running_mean,
                          const T* running_var, T* y);
// dy -> dx, dgamma [C], dbeta [C].
template <typename T>
void BatchNormBackward(const Context& ctx, const BatchNormShape& shape, const T* x,
                       const T* gamma, const T* save_mean, const T* save_inv_std, const T* dy,
                       T* dx, T* dgamma, T* dbeta);

// ---- Loss ------------------------------------------------------------------------

// Mean softmax cross-entropy over the batch. logits [N, classes], labels [N].
// Returns the mean loss; writes dlogits = scale * (softmax - onehot) / N when
// dlogits != nullptr (scale is the loss scale). correct, when not null, gets
// the number of rows whose argmax equals the label.
template <typename T>
double SoftmaxCrossEntropy(const Context& ctx, int n, int classes, const T* logits,
                           const int32_t* labels, T scale, T* dlogits, int* correct);

// ---- Vector ops (optimizer and mixed precision) ---------------------------------

// Sum of squares, accumulated in double, in an order fixed by the thread
// count (below 32k elements: one thread, so the same bits on every run; the
// optimizer's LARS norms call it per chunk).
template <typename T>
double SumSquares(const Context& ctx, size_t count, const T* x);
// One thread's SumSquares (the same order and bits), on the calling thread,
// and in *within whether every |x[i]| <= limit (false for a NaN): the
// all-reduce's per-bucket contribution check, beside a busy trainer.
double SumSquaresWithin(size_t count, const float* x, double limit, bool* within);
// True when every element is finite.
template <typename T>
bool AllFinite(const Context& ctx, size_t count, const T* x);
// y = a * x + y
template <typename T>
void Axpy(const Context& ctx, size_t count, T a, const T* x, T* y);
// x *= a
template <typename T>
void Scale(const Context& ctx, size_t count, T a, T* x);

// ---- FP16 <-> FP32 ---------------------------------------------------------------
// Round to nearest even; Inf/NaN/subnormals exact. An AVX-512 or F16C/AVX2 path
// is chosen at run time when the CPU has it; otherwise the portable scalar code
// in common/fp16.h. All give the same bits.

void HalfToFloat(const uint16_t* in, float* out, size_t count);
void FloatToHalf(const float* in, uint16_t* out, size_t count);
// Rounds each float to the nearest FP16 value, in place (x = float(half(x))).
void RoundToHalf(float* x, size_t count);
// out = float(half(in)); out may equal in.
void RoundToHalf(const float* in, float* out, size_t count);
// x = float(half(x)) * scale in one pass (FP16 gradients: round the scaled
// value, then unscale; an overflow stays Inf).
void RoundToHalfScaled(float* x, size_t count, float scale);
// bits = half(in) and out = float(bits) in one pass (an activation kept as
// FP16 for backward while its rounded FP32 copy feeds the next layer); out may
// equal in.
void RoundToHalfKeepBits(const float* in, float* out, uint16_t* bits, size_t count);
// acc = half(float(acc) + float(in)) in one pass (the FP16 all-reduce's sum),
// always on the calling thread.
void AddHalves(uint16_t* acc, const uint16_t* in, size_t count);
// Name of the conversion path in use: "avx512", "f16c" or "portable".
const char* HalfConversionPath();
// Caps the conversion path (for tests and benchmarks of every path): kBest
// takes the best the CPU has, kF16c at most F16C/AVX2, kPortable the scalar code.
enum class HalfConversion { kBest, kF16c, kPortable };
void LimitHalfConversion(HalfConversion limit);

}  // namespace chorus::kernels
