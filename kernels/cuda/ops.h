// The CUDA ops: the same operations as kernels/ops.h on device memory, in FP16
// storage with FP32 accumulation (tensor cores), plus the fused mixed-precision
// and optimizer kernels and the gossip codecs. Plain C++ (no CUDA headers).
//
// Conventions (as kernels/ops.h): activations NCHW row-major, a fully connected
// weight [out, in]; every op fully writes its outputs. All pointers are device
// pointers unless named host_*. Every op enqueues on the device's stream and
// returns the launch status; results are ready after Device::Synchronize (or
// for later ops on the same stream at once).
//
// Numerics follow the CPU model in FP16 mode: inputs are FP16 values, products
// are accumulated in FP32, and each output is rounded once to FP16. Values
// that change every step (loss scale, learning rate) are read from device
// memory so that a captured CUDA graph replays correctly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/device.h"
#include "kernels/ops.h"

namespace chorus::kernels::cuda {

// ---- Casts (round to nearest even; Inf/NaN/subnormals exact) -----------------

[[nodiscard]] Status FloatToHalf(Device& d, const float* x, Half* y, size_t count);
[[nodiscard]] Status HalfToFloat(Device& d, const Half* x, float* y, size_t count);
// y = float(half(x)): the FP32 expansion of x rounded to FP16, and its bits.
[[nodiscard]] Status RoundToHalf(Device& d, const float* x, Half* y_half, float* y_float,
                                 size_t count);

// ---- A data set held on the device ---------------------------------------------

// A batch gathered from a data set on the device: out[k, :] = table[rows[k], :]
// (rows of `row` FP16 elements) and out_labels[k] = labels[rows[k]], k < n.
// Every rows[k] must lie in the table (the caller checks them on the host).
[[nodiscard]] Status GatherRows(Device& d, const Half* table, const int32_t* labels, size_t row,
                                const int32_t* rows, int n, Half* out, int32_t* out_labels);

// ---- GEMM and fully connected (cuBLAS / cuBLASLt, FP16 in, FP32 accumulate) ----

// Row-major, as kernels::Gemm: C[M,N] = alpha op(A) op(B) + beta C, A,B FP16.
[[nodiscard]] Status Gemm(Device& d, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const Half* a, int lda, const Half* b, int ldb,
                          float beta, Half* c, int ldc);
// The same with an FP32 C.
[[nodiscard]] Status Gemm(Device& d, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const Half* a, int lda, const Half* b, int ldb,
                          float beta, float* c, int ldc);

// x [N, in], w [out, in], b [out] -> y [N, out] = x w^T + b (bias added in FP32,
// rounded once).
[[nodiscard]] Status LinearForward(Device& d, int n, int in, int out, const Half* x,
                                   const Half* w, const Half* b, Half* y);
// dy [N, out] -> dx [N, in] (skipped when nullptr), dw [out, in] = dy^T x,
// db [out] = column sums of dy.
[[nodiscard]] Status LinearBackward(Device& d, int n, int in, int out, const Half* x,
                                    const Half* w, const Half* dy, Half* dx, Half* dw, Half* db);

// ---- Convolution (cuDNN) and BatchNorm (own kernels) --------------------------------

// Descriptors, chosen algorithms and workspace size for one Conv2dShape (the
// batch size is shape.n; a new batch size needs a new plan).
class ConvPlan {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ConvPlan>> Create(Device& d,
                                                                const Conv2dShape& shape);
  virtual ~ConvPlan() = default;
  virtual const Conv2dShape& shape() const = 0;
  // Bytes of device workspace Forward and Backward need.
  virtual size_t workspace_bytes() const = 0;
  // x [N,C,H,W], w [K,C,R,S], b [K] -> y [N,K,P,Q] = conv(x, w) + b, rounded once.
  [[nodiscard]] virtual Status Forward(Device& d, const Half* x, const Half* w, const Half* b,
                                       Half* y, void* workspace) = 0;
  // dy -> dx (skipped when nullptr), dw, db.
  [[nodiscard]] virtual Status Backward(Device& d, const Half* x, const Half* w, const Half* dy,
                                        Half* dx, Half* dw, Half* db, void* workspace) = 0;
};

// Spatial BatchNorm over [N, C, HW]: FP16 x / y, FP32 per-channel parameters and
// statistics (as kernels::BatchNorm*; running variance unbiased). Deterministic:
// fixed-order sums in double, no atomics (kernels/cuda/channels.cu).
class BatchNormPlan {
 public:
  [[nodiscard]] static Result<std::unique_ptr<BatchNormPlan>> Create(
      Device& d, const BatchNormShape& shape);
  virtual ~BatchNormPlan() = default;
  virtual const BatchNormShape& shape() const = 0;
  [[nodiscard]] virtual Status ForwardTrain(Device& d, const Half* x, const float* gamma,
                                            const float* beta, Half* y, float* save_mean,
                                            float* save_inv_std, float* running_mean,
                                            float* running_var) = 0;
  [[nodiscard]] virtual Status ForwardEval(Device& d, const Half* x, const float* gamma,
                                           const float* beta, const float* running_mean,
                                           const float* running_var, Half* y) = 0;
  // dgamma, dbeta are FP32.
  [[nodiscard]] virtual Status Backward(Device& d, const Half* x, const float* gamma,
                                        const float* save_mean, const float* save_inv_std,
                                        const Half* dy, Half* dx, float* dgamma,
                                        float* dbeta) = 0;
};

// ---- Activation and pooling (own kernels) -------------------------------------------

[[nodiscard]] Status ReluForward(Device& d, size_t count, const Half* x, Half* y);
// dx = dy * (y > 0); dx may alias dy.
[[nodiscard]] Status ReluBackward(Device& d, size_t count, const Half* y, const Half* dy,
                                  Half* dx);
// Window and stride `size`, no padding, H and W divisible by size; argmax as the
// CPU op (flat input index, first maximum on ties).
[[nodiscard]] Status MaxPoolForward(Device& d, int n, int c, int h, int w, int size,
                                    const Half* x, Half* y, int32_t* argmax);
[[nodiscard]] Status MaxPoolBackward(Device& d, int n, int c, int h, int w, int size,
                                     const Half* dy, const int32_t* argmax, Half* dx);

// ---- Loss ---------------------------------------------------------------------------

// Mean softmax cross-entropy of logits [N, classes] (FP16) with labels [N]:
// *loss_sum gets the sum over rows of the per-row loss (FP32, deterministic
// order), *correct the rows whose argmax is the label (first maximum on ties).
// When dlogits != nullptr it gets *scale * (softmax - onehot) / N in FP16; scale
// is a device scalar (the loss scale). Any N >= 1, any classes >= 1.
[[nodiscard]] Status SoftmaxCrossEntropy(Device& d, int n, int classes, const Half* logits,
                                         const int32_t* labels, const float* scale,
                                         Half* dlogits, float* loss_sum, int32_t* correct);

// ---- Mixed precision ------------------------------------------------------------------

// g32 = float(g16) * *inv_scale; sets *nonfinite = 1 when any g16 is Inf/NaN
// (never clears it: zero it before the step).
[[nodiscard]] Status UnscaleGradients(Device& d, size_t count, const Half* g16,
                                      const float* inv_scale, float* g32, int32_t* nonfinite);
// Sets *nonfinite = 1 when any x is Inf/NaN (never clears it).
[[nodiscard]] Status CheckFinite(Device& d, size_t count, const float* x, int32_t* nonfinite);

// ---- Optimizer: fused LARS / SGD over all tensors in two launches -----------------

struct TensorRange {
  size_t offset = 0;     // floats into master / gradients / momentum
  size_t count = 0;
  bool decayed = false;  // weight decay and the LARS trust ratio apply (weights only)
};

struct FusedOptimizerOptions {
  bool lars = true;  // false: SGD with momentum (PyTorch's torch.optim.SGD)
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  float eta = 0.001f;
};

// The update of trainer/optimizer.h on the device: one launch computes every
// tensor's ||w|| and ||g|| (partial sums per chunk, combined in a fixed order:
// deterministic), one launch updates master and momentum and writes the FP16
// working copy (and its FP32 expansion when working_float != nullptr) in the
// same pass over memory.
class FusedOptimizer {
 public:
  [[nodiscard]] static Result<std::unique_ptr<FusedOptimizer>> Create(
      Device& d, std::span<const TensorRange> tensors, const FusedOptimizerOptions& options);
  virtual ~FusedOptimizer() = default;
  // lr is a device scalar. Skips nothing: the caller decides whether to step.
  [[nodiscard]] virtual Status Step(Device& d, const float* lr, float* master,
                                    const float* gradients, float* momentum, Half* working_half,
                                    float* working_float) = 0;
  // Each tensor's LARS local lr of the last Step (1 for SGD and excluded tensors),
  // copied to the host (synchronises).
  [[nodiscard]] virtual Result<std::vector<double>> LastLocalLr(Device& d) = 0;
};

// ---- Gossip codecs on the device -----------------------------------------------------
// Payloads byte-identical to gossip/codec*.cc after its 16-byte header (the
// caller writes the header), so a GPU node and a CPU node interoperate. All
// buffers are device memory; payloads must be 2-byte (fp16) or 4-byte (others)
// aligned, as a cudaMalloc'd message after its 16-byte header is. Decoders
// also flag (*nonfinite / *bad) what the CPU rejects as malformed (int8 q =
// -128, negative scales, stray sign bits, top-k indices not ascending); top-k
// values are written through unchecked (run CheckFinite on `out`).

size_t Fp16PayloadBytes(size_t n);
size_t Int8PayloadBytes(size_t n, int chunk);
size_t SignPayloadBytes(size_t n, int chunk);
size_t TopKPayloadBytes(size_t k);

[[nodiscard]] Status EncodeFp16(Device& d, const float* x, size_t n, std::byte* payload);
[[nodiscard]] Status EncodeInt8(Device& d, const float* x, size_t n, int chunk,
                                std::byte* payload);
[[nodiscard]] Status EncodeSign(Device& d, const float* x, size_t n, int chunk,
                                std::byte* payload);
// Decoders write out[n]; *nonfinite = 1 when a decoded value or scale is not
// finite (never cleared). Structural checks (sizes, header) are the caller's.
[[nodiscard]] Status DecodeFp16(Device& d, const std::byte* payload, size_t n, float* out,
                                int32_t* nonfinite);
[[nodiscard]] Status DecodeInt8(Device& d, const std::byte* payload, size_t n, int chunk,
                                float* out, int32_t* nonfinite);
[[nodiscard]] Status DecodeSign(Device& d, const std::byte* payload, size_t n, int chunk,
                                float* out, int32_t* nonfinite);

// Top-k by |x| (NaN ranks above +Inf; ties: lower index first), the k indices
// ascending then their values, as gossip's top-k codec. Holds the radix-sort
// workspace for vectors of up to max_n elements.
class TopKEncoder {
 public:
  [[nodiscard]] static Result<std::unique_ptr<TopKEncoder>> Create(Device& d, size_t max_n);
  virtual ~TopKEncoder() = default;
  [[nodiscard]] virtual Status Encode(Device& d, const float* x, size_t n, size_t k,
                                      std::byte* payload) = 0;
};
// out = 0 except out[index_i] = value_i; indices must be < n (checked: an index
// out of range sets *bad = 1 and is skipped).
[[nodiscard]] Status DecodeTopK(Device& d, const std::byte* payload, size_t n, size_t k,
                                float* out, int32_t* bad);

}  // namespace chorus::kernels::cuda
