// Convolution and BatchNorm on the GPU through cuDNN's legacy (v7-style)
// descriptor API, which cuDNN 9 still ships (deprecated, hence
// -Wno-deprecated-declarations in kernels/CMakeLists.txt). We use it rather
// than the graph API because these plans are small, fixed and well trodden.
//
// ConvPlan: x [N,C,H,W], w [K,C,R,S], y [N,K,P,Q], all NCHW FP16; cross-
// correlation (no filter flip) with symmetric zero padding `pad` and stride
// `stride` in both dimensions, as kernels::Conv2dForward. Products accumulate
// in FP32 (convolution compute type FLOAT) on tensor cores. Algorithms for the
// forward, backward-data and backward-filter passes are chosen once at Create
// by cuDNN's heuristics (cudnnGet*Algorithm_v7: no GPU memory, no timing runs);
// in the backward passes deterministic algorithms are preferred, so that two
// runs of a step give the same bits. workspace_bytes() is the largest of the
// three workspaces.
//   Forward: y = broadcast(b) (cudnnAddTensor, beta = 0), then
//            y = conv(x, w) + 1 * y (cudnnConvolutionForward, beta = 1): the
//            FP16 bias joins the FP32 sum before the one rounding of y, as on
//            the CPU (which also starts y from the bias and adds the GEMM).
//   Backward: db = sums of dy over N, P, Q (cudnnConvolutionBackwardBias),
//            dw (BackwardFilter), dx (BackwardData, when dx != nullptr).
//
// BatchNormPlan: spatial BatchNorm over x [N, C, HW] seen by cuDNN as the FP16
// tensor [N, C, HW, 1]; gamma, beta, means and variances are FP32 [1, C, 1, 1]
// (cudnnDeriveBNTensorDescriptor). Training normalises with the biased batch
// variance and writes cuDNN's resultSaveMean / resultSaveInvVariance, which
// (despite the name) is 1 / sqrt(var + eps): our save_inv_std. The running
// variance is updated with the unbiased batch variance var * m / (m - 1),
// m = N * HW, as kernels::BatchNormForwardTrain: that is what cuDNN does
// (PyTorch hands its running_var straight to cuDNN and documents it as
// unbiased; tests/cuda/conv_bn_test.cc checks it on shapes where the factor
// m / (m - 1) is visible). exponentialAverageFactor = shape.momentum gives
// running = (1 - momentum) * running + momentum * batch.
//
// Nothing here allocates device memory after Create; the caller passes the
// convolution workspace. Descriptors are owned by the plans.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

// Algorithms needing more workspace than this are passed over (FFT variants
// can ask for hundreds of MiB on large images).
constexpr size_t kMaxConvWorkspaceBytes = size_t{256} << 20;

std::string Describe(const Conv2dShape& s) {
  return "conv N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
         " H=" + std::to_string(s.h) + " W=" + std::to_string(s.w) +
         " K=" + std::to_string(s.k) + " R=" + std::to_string(s.r) +
         " S=" + std::to_string(s.s) + " pad=" + std::to_string(s.pad) +
         " stride=" + std::to_string(s.stride);
}

std::string Describe(const BatchNormShape& s) {
  return "batchnorm N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
         " HW=" + std::to_string(s.hw);
}

// The first usable algorithm in cuDNN's ranking (best first): status success,
// cuDNN can size its workspace, the workspace is at most
// kMaxConvWorkspaceBytes, and (first pass only, when asked) deterministic.
// workspace_of(algo, &bytes) returns the cudnnStatus_t of the size query.
template <typename Perf, typename WorkspaceOf>
Result<std::pair<decltype(Perf::algo), size_t>> PickAlgorithm(const char* what, const Perf* perf,
                                                               int count, bool prefer_deterministic,
                                                               const WorkspaceOf& workspace_of) {
  for (int pass = prefer_deterministic ? 0 : 1; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      size_t bytes = 0;
      if (workspace_of(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      if (bytes > kMaxConvWorkspaceBytes) continue;
      return std::make_pair(perf[i].algo, bytes);
    }
  }
  return Err(Internal(std::string("cuDNN offers no usable ") + what + " algorithm (" +
                      std::to_string(count) + " candidates)"));
}

class CudnnConvPlan final : public ConvPlan {
 public:
  explicit CudnnConvPlan(const Conv2dShape& shape) : shape_(shape) {}
  ~CudnnConvPlan() override {
    if (conv_ != nullptr) cudnnDestroyConvolutionDescriptor(conv_);
    if (w_ != nullptr) cudnnDestroyFilterDescriptor(w_);
    if (bias_ != nullptr) cudnnDestroyTensorDescriptor(bias_);
    if (y_ != nullptr) cudnnDestroyTensorDescriptor(y_);
    if (x_ != nullptr) cudnnDestroyTensorDescriptor(x_);
  }
  CudnnConvPlan(const CudnnConvPlan&) = delete;
  CudnnConvPlan& operator=(const CudnnConvPlan&) = delete;

  // The descriptors of x, w, y and bias for shape_, then the algorithm of each
  // pass (forward, backward data, backward filter) and the largest workspace.
  Status Init(Device& d) {
    const Conv2dShape& s = shape_;
    if (s.n <= 0 || s.c <= 0 || s.h <= 0 || s.w <= 0 || s.k <= 0 || s.r <= 0 || s.s <= 0 ||
        s.stride <= 0 || s.pad < 0 || s.OutH() <= 0 || s.OutW() <= 0) {
      return InvalidArgument("ConvPlan: invalid shape: " + Describe(s));
    }
    CHORUS_RETURN_IF_ERROR(CreateDescriptors());
    CHORUS_RETURN_IF_ERROR(DescribeShapes());
    cudnnHandle_t handle = d.impl().cudnn;
    CHORUS_RETURN_IF_ERROR(PickForward(handle));
    CHORUS_RETURN_IF_ERROR(PickBackwardData(handle));
    return PickBackwardFilter(handle);
  }

 private:
  Status CreateDescriptors() {
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&bias_),
                                 "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv_),
                                 "cudnnCreateConvolutionDescriptor");
    return Status::Ok();
  }

  // x and w from shape_, the convolution (cross-correlation, FP32 accumulation,
  // tensor cores allowed), then y as cuDNN computes it (it must be ours) and bias.
  Status DescribeShapes() {
    const Conv2dShape& s = shape_;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, s.n, s.c, s.h, s.w),
        "cudnnSetTensor4dDescriptor(x)");
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, s.k, s.c, s.r, s.s),
        "cudnnSetFilter4dDescriptor(w)");
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetConvolution2dDescriptor(conv_, s.pad, s.pad, s.stride, s.stride,
                                        /*dilation_h=*/1, /*dilation_w=*/1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetConvolutionMathType(conv_, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION),
        "cudnnSetConvolutionMathType");
    // cuDNN's output size must be ours ((H + 2 pad - R) / stride + 1, ...).
    int yn = 0, yk = 0, yp = 0, yq = 0;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &yn, &yk, &yp, &yq),
        "cudnnGetConvolution2dForwardOutputDim");
    if (yn != s.n || yk != s.k || yp != s.OutH() || yq != s.OutW()) {
      return Internal("ConvPlan: cuDNN output [" + std::to_string(yn) + "," + std::to_string(yk) +
                      "," + std::to_string(yp) + "," + std::to_string(yq) + "] for " +
                      Describe(s) + ", expected P=" + std::to_string(s.OutH()) +
                      " Q=" + std::to_string(s.OutW()));
    }
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF,
                                                            s.n, s.k, s.OutH(), s.OutW()),
                                 "cudnnSetTensor4dDescriptor(y)");
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, s.k, 1, 1),
        "cudnnSetTensor4dDescriptor(bias)");
    return Status::Ok();
  }

  Status PickForward(cudnnHandle_t handle) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolutionForwardAlgorithm_v7(handle, x_, w_, conv_, y_,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
        "cudnnGetConvolutionForwardAlgorithm_v7");
    auto picked = PickAlgorithm("forward convolution", perf, count,
                                /*prefer_deterministic=*/false,
                                [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
                                  return cudnnGetConvolutionForwardWorkspaceSize(
                                      handle, x_, w_, conv_, y_, algo, bytes);
                                });
    if (!picked) return picked.error().WithContext(Describe(shape_));
    fwd_algo_ = picked->first;
    workspace_ = std::max(workspace_, picked->second);
    return Status::Ok();
  }

  Status PickBackwardData(cudnnHandle_t handle) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                     handle, w_, y_, conv_, x_,
                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                                 "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    auto picked = PickAlgorithm("backward-data convolution", perf, count,
                                /*prefer_deterministic=*/true,
                                [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
                                  return cudnnGetConvolutionBackwardDataWorkspaceSize(
                                      handle, w_, y_, conv_, x_, algo, bytes);
                                });
    if (!picked) return picked.error().WithContext(Describe(shape_));
    bwd_data_algo_ = picked->first;
    workspace_ = std::max(workspace_, picked->second);
    return Status::Ok();
  }

  Status PickBackwardFilter(cudnnHandle_t handle) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                     handle, x_, y_, conv_, w_,
                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
                                 "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    auto picked = PickAlgorithm("backward-filter convolution", perf, count,
                                /*prefer_deterministic=*/true,
                                [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
                                  return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                      handle, x_, y_, conv_, w_, algo, bytes);
                                });
    if (!picked) return picked.error().WithContext(Describe(shape_));
    bwd_filter_algo_ = picked->first;
    workspace_ = std::max(workspace_, picked->second);
    return Status::Ok();
  }

 public:
  const Conv2dShape& shape() const override { return shape_; }
  size_t workspace_bytes() const override { return workspace_; }

  Status Forward(Device& d, const Half* x, const Half* w, const Half* b, Half* y,
                 void* workspace) override {
    if (workspace == nullptr && workspace_ > 0) {
      return InvalidArgument("ConvPlan::Forward: no workspace (" + std::to_string(workspace_) +
                             " bytes needed) for " + Describe(shape_));
    }
    cudnnHandle_t handle = d.impl().cudnn;
    // Scaling factors are float for FP16 data (cuDNN: float unless double data).
    const float one = 1.0f, zero = 0.0f;
    float beta = 0.0f;
    if (b != nullptr) {
      // y = broadcast b over N, P, Q (beta = 0: y is not read).
      CHORUS_CUDNN_RETURN_IF_ERROR(cudnnAddTensor(handle, &one, bias_, b, &zero, y_, y),
                                   "cudnnAddTensor(conv bias)");
      beta = 1.0f;
    }
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnConvolutionForward(handle, &one, x_, x, w_, w, conv_, fwd_algo_, workspace, workspace_,
                                &beta, y_, y),
        "cudnnConvolutionForward");
    return Status::Ok();
  }

  Status Backward(Device& d, const Half* x, const Half* w, const Half* dy, Half* dx, Half* dw,
                  Half* db, void* workspace) override {
    if (workspace == nullptr && workspace_ > 0) {
      return InvalidArgument("ConvPlan::Backward: no workspace (" + std::to_string(workspace_) +
                             " bytes needed) for " + Describe(shape_));
    }
    cudnnHandle_t handle = d.impl().cudnn;
    const float one = 1.0f, zero = 0.0f;
    if (db != nullptr) {
      CHORUS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardBias(handle, &one, y_, dy, &zero, bias_, db),
          "cudnnConvolutionBackwardBias");
    }
    if (dw != nullptr) {
      CHORUS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardFilter(handle, &one, x_, x, y_, dy, conv_, bwd_filter_algo_,
                                         workspace, workspace_, &zero, w_, dw),
          "cudnnConvolutionBackwardFilter");
    }
    if (dx != nullptr) {
      CHORUS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardData(handle, &one, w_, w, y_, dy, conv_, bwd_data_algo_,
                                       workspace, workspace_, &zero, x_, dx),
          "cudnnConvolutionBackwardData");
    }
    return Status::Ok();
  }

 private:
  Conv2dShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace_ = 0;
};

class CudnnBatchNormPlan final : public BatchNormPlan {
 public:
  explicit CudnnBatchNormPlan(const BatchNormShape& shape) : shape_(shape) {}
  ~CudnnBatchNormPlan() override {
    if (param_ != nullptr) cudnnDestroyTensorDescriptor(param_);
    if (x_ != nullptr) cudnnDestroyTensorDescriptor(x_);
  }
  CudnnBatchNormPlan(const CudnnBatchNormPlan&) = delete;
  CudnnBatchNormPlan& operator=(const CudnnBatchNormPlan&) = delete;

  Status Init() {
    const BatchNormShape& s = shape_;
    if (s.n <= 0 || s.c <= 0 || s.hw <= 0) {
      return InvalidArgument("BatchNormPlan: invalid shape: " + Describe(s));
    }
    if (!(s.eps >= CUDNN_BN_MIN_EPSILON) || !(s.eps > 0.0)) {
      return InvalidArgument("BatchNormPlan: eps " + std::to_string(s.eps) +
                             " must be > 0 (and >= CUDNN_BN_MIN_EPSILON)");
    }
    if (!(s.momentum >= 0.0 && s.momentum <= 1.0)) {
      return InvalidArgument("BatchNormPlan: momentum " + std::to_string(s.momentum) +
                             " must be in [0, 1]");
    }
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&param_),
                                 "cudnnCreateTensorDescriptor");
    // x [N, C, HW] as the 4-D [N, C, HW, 1]: spatial mode reduces over N, H, W.
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, s.n, s.c, s.hw, 1),
        "cudnnSetTensor4dDescriptor(batchnorm x)");
    // [1, C, 1, 1], FLOAT for HALF data.
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnDeriveBNTensorDescriptor(param_, x_, CUDNN_BATCHNORM_SPATIAL),
                                 "cudnnDeriveBNTensorDescriptor");
    return Status::Ok();
  }

  const BatchNormShape& shape() const override { return shape_; }

  Status ForwardTrain(Device& d, const Half* x, const float* gamma, const float* beta, Half* y,
                      float* save_mean, float* save_inv_std, float* running_mean,
                      float* running_var) override {
    // m = 1 has no unbiased variance (cuDNN would divide by m - 1 = 0); PyTorch
    // refuses it too.
    if (static_cast<size_t>(shape_.n) * static_cast<size_t>(shape_.hw) < 2) {
      return InvalidArgument("BatchNormPlan::ForwardTrain: one value per channel: " +
                             Describe(shape_));
    }
    // As the CPU op: running statistics move only when both are given.
    const bool update_running = running_mean != nullptr && running_var != nullptr;
    const float one = 1.0f, zero = 0.0f;  // y = 1 * BN(x) + 0 * y
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnBatchNormalizationForwardTraining(
            d.impl().cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_, x, x_, y, param_, gamma,
            beta, shape_.momentum, update_running ? running_mean : nullptr,
            update_running ? running_var : nullptr, shape_.eps, save_mean, save_inv_std),
        "cudnnBatchNormalizationForwardTraining");
    return Status::Ok();
  }

  Status ForwardEval(Device& d, const Half* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, Half* y) override {
    const float one = 1.0f, zero = 0.0f;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnBatchNormalizationForwardInference(d.impl().cudnn, CUDNN_BATCHNORM_SPATIAL, &one,
                                                &zero, x_, x, x_, y, param_, gamma, beta,
                                                running_mean, running_var, shape_.eps),
        "cudnnBatchNormalizationForwardInference");
    return Status::Ok();
  }

  Status Backward(Device& d, const Half* x, const float* gamma, const float* save_mean,
                  const float* save_inv_std, const Half* dy, Half* dx, float* dgamma,
                  float* dbeta) override {
    if (dx == nullptr || dgamma == nullptr || dbeta == nullptr) {
      return InvalidArgument("BatchNormPlan::Backward: dx, dgamma and dbeta are required");
    }
    // dx = 1 * grad + 0 * dx; dgamma, dbeta likewise overwritten (not accumulated).
    const float one = 1.0f, zero = 0.0f;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnBatchNormalizationBackward(d.impl().cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                        &zero, x_, x, x_, dy, x_, dx, param_, gamma, dgamma, dbeta,
                                        shape_.eps, save_mean, save_inv_std),
        "cudnnBatchNormalizationBackward");
    return Status::Ok();
  }

 private:
  BatchNormShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr;
  cudnnTensorDescriptor_t param_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<ConvPlan>> ConvPlan::Create(Device& d, const Conv2dShape& shape) {
  auto plan = std::make_unique<CudnnConvPlan>(shape);
  CHORUS_RETURN_IF_ERROR(plan->Init(d));
  return std::unique_ptr<ConvPlan>(std::move(plan));
}

Result<std::unique_ptr<BatchNormPlan>> BatchNormPlan::Create(Device& d,
                                                             const BatchNormShape& shape) {
  auto plan = std::make_unique<CudnnBatchNormPlan>(shape);
  CHORUS_RETURN_IF_ERROR(plan->Init());
  return std::unique_ptr<BatchNormPlan>(std::move(plan));
}

}  // namespace chorus::kernels::cuda
