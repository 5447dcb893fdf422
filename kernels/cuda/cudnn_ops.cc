// Convolution on the GPU through cuDNN's legacy (v7-style)
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
// runs of a step give the same bits.
//   Forward: y = half(conv(x, w) + b), rounded once, as on the CPU (which
//            starts y from the bias and adds the GEMM in FP32). cuDNN's FP16
//            forward does not promise that: with the bias blended in as
//            beta * y, some algorithms round the sum to FP16 before adding it
//            (the CNN's conv2 on sm_90). So x and w are expanded to FP32
//            (exact), cuDNN convolves FP32 tensors (TF32 tensor cores hold
//            FP16 values exactly; FP32 accumulation) into an FP32 sum, and
//            conv.cu adds the bias and rounds once.
//   Backward: db = sums of dy over N, P, Q in double, rounded once (own
//            kernel, channels.cu: cuDNN's cudnnConvolutionBackwardBias ran at
//            about a tenth of the memory bandwidth), dw (BackwardFilter), dx
//            (BackwardData, when dx != nullptr), on the FP16 tensors: each
//            output is one FP32 sum, rounded once.
// workspace_bytes(): the largest workspace of the three algorithms, then the
// forward's FP32 x, w and sum, then the bias gradient's partial sums.
//
// BatchNorm is not here: channels.cu runs it on own kernels.
//
// Nothing here allocates device memory after Create; the caller passes the
// convolution workspace. Descriptors are owned by the plans.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {

// conv.cu
namespace conv_kernels {
Status BiasToHalf(Device::Impl& impl, int n, int channels, size_t plane, const float* sum,
                  const Half* bias, Half* y);
}  // namespace conv_kernels

// channels.cu
int ChannelSplits(const Device::Impl& impl, int n, int channels);
namespace conv_kernels {
Status BiasGradient(Device::Impl& impl, int n, int channels, size_t plane, const Half* dy,
                    double* partial, Half* db);
}  // namespace conv_kernels

namespace {

// Algorithms needing more workspace than this are passed over (FFT variants
// can ask for hundreds of MiB on large images).
constexpr size_t kMaxConvWorkspaceBytes = size_t{256} << 20;
// Start of each part of a plan's workspace (cudaMalloc gives 256-byte blocks).
constexpr size_t kWorkspaceAlign = 256;

size_t AlignUp(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

std::string Describe(const Conv2dShape& s) {
  return "conv N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
         " H=" + std::to_string(s.h) + " W=" + std::to_string(s.w) +
         " K=" + std::to_string(s.k) + " R=" + std::to_string(s.r) +
         " S=" + std::to_string(s.s) + " pad=" + std::to_string(s.pad) +
         " stride=" + std::to_string(s.stride);
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
    if (conv32_ != nullptr) cudnnDestroyConvolutionDescriptor(conv32_);
    if (w32_ != nullptr) cudnnDestroyFilterDescriptor(w32_);
    if (y32_ != nullptr) cudnnDestroyTensorDescriptor(y32_);
    if (x32_ != nullptr) cudnnDestroyTensorDescriptor(x32_);
    if (conv_ != nullptr) cudnnDestroyConvolutionDescriptor(conv_);
    if (w_ != nullptr) cudnnDestroyFilterDescriptor(w_);
    if (y_ != nullptr) cudnnDestroyTensorDescriptor(y_);
    if (x_ != nullptr) cudnnDestroyTensorDescriptor(x_);
  }
  CudnnConvPlan(const CudnnConvPlan&) = delete;
  CudnnConvPlan& operator=(const CudnnConvPlan&) = delete;

  // The descriptors of x, w and y for shape_ (FP16, and FP32 for the
  // forward), then the algorithm of each pass (forward, backward data, backward
  // filter) and the workspace's layout.
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
    CHORUS_RETURN_IF_ERROR(PickBackwardFilter(handle));
    LayOutWorkspace(ChannelSplits(d.impl(), s.n, s.k));
    return Status::Ok();
  }

 private:
  Status CreateDescriptors() {
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv_),
                                 "cudnnCreateConvolutionDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&x32_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&y32_), "cudnnCreateTensorDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w32_), "cudnnCreateFilterDescriptor");
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv32_),
                                 "cudnnCreateConvolutionDescriptor");
    return Status::Ok();
  }

  // x, w and the convolution of shape_ with elements of `type`: a
  // cross-correlation with FP32 accumulation, tensor cores as `math` allows.
  Status DescribeInputs(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                        cudnnDataType_t type, cudnnMathType_t math) {
    const Conv2dShape& s = shape_;
    const std::string of = type == CUDNN_DATA_HALF ? "(half)" : "(float)";
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, s.n, s.c, s.h, s.w),
                                 ("cudnnSetTensor4dDescriptor(x) " + of).c_str());
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, s.k, s.c, s.r, s.s),
                                 ("cudnnSetFilter4dDescriptor(w) " + of).c_str());
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnSetConvolution2dDescriptor(conv, s.pad, s.pad, s.stride, s.stride,
                                        /*dilation_h=*/1, /*dilation_w=*/1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        ("cudnnSetConvolution2dDescriptor " + of).c_str());
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv, math),
                                 ("cudnnSetConvolutionMathType " + of).c_str());
    return Status::Ok();
  }

  // The FP16 x, w and convolution of shape_ (tensor cores allowed), then y as
  // cuDNN computes it (it must be ours), and the forward's FP32 ones.
  Status DescribeShapes() {
    const Conv2dShape& s = shape_;
    CHORUS_RETURN_IF_ERROR(DescribeInputs(x_, w_, conv_, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
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
    return DescribeForwardShapes();
  }

  // The forward's FP32 x, w and sum, and its convolution: FP32 compute, tensor
  // cores allowed (TF32 keeps the 11 significant bits of an FP16 value).
  Status DescribeForwardShapes() {
    const Conv2dShape& s = shape_;
    CHORUS_RETURN_IF_ERROR(DescribeInputs(x32_, w32_, conv32_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH));
    CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(y32_, CUDNN_TENSOR_NCHW,
                                                            CUDNN_DATA_FLOAT, s.n, s.k, s.OutH(),
                                                            s.OutW()),
                                 "cudnnSetTensor4dDescriptor(y, float)");
    return Status::Ok();
  }

  Status PickForward(cudnnHandle_t handle) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnGetConvolutionForwardAlgorithm_v7(handle, x32_, w32_, conv32_, y32_,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
        "cudnnGetConvolutionForwardAlgorithm_v7");
    auto picked = PickAlgorithm("forward convolution", perf, count,
                                /*prefer_deterministic=*/false,
                                [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
                                  return cudnnGetConvolutionForwardWorkspaceSize(
                                      handle, x32_, w32_, conv32_, y32_, algo, bytes);
                                });
    if (!picked) return picked.error().WithContext(Describe(shape_));
    fwd_algo_ = picked->first;
    algo_workspace_ = std::max(algo_workspace_, picked->second);
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
    algo_workspace_ = std::max(algo_workspace_, picked->second);
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
    algo_workspace_ = std::max(algo_workspace_, picked->second);
    return Status::Ok();
  }

  // [algorithm workspace | x32 | w32 | sum32 | bias partials], each part
  // 256-byte aligned.
  void LayOutWorkspace(int bias_splits) {
    const Conv2dShape& s = shape_;
    const size_t x_count = static_cast<size_t>(s.n) * s.c * s.h * s.w;
    const size_t w_count = static_cast<size_t>(s.k) * s.c * s.r * s.s;
    const size_t y_count = static_cast<size_t>(s.n) * s.k * s.OutH() * s.OutW();
    x32_offset_ = AlignUp(algo_workspace_);
    w32_offset_ = x32_offset_ + AlignUp(x_count * sizeof(float));
    sum32_offset_ = w32_offset_ + AlignUp(w_count * sizeof(float));
    bias_offset_ = sum32_offset_ + AlignUp(y_count * sizeof(float));
    workspace_ = bias_offset_ + AlignUp(static_cast<size_t>(s.k) * bias_splits * sizeof(double));
  }

 public:
  const Conv2dShape& shape() const override { return shape_; }
  size_t workspace_bytes() const override { return workspace_; }

  Status Forward(Device& d, const Half* x, const Half* w, const Half* b, Half* y,
                 void* workspace) override {
    if (workspace == nullptr) {
      return InvalidArgument("ConvPlan::Forward: no workspace (" + std::to_string(workspace_) +
                             " bytes needed) for " + Describe(shape_));
    }
    const Conv2dShape& s = shape_;
    std::byte* base = static_cast<std::byte*>(workspace);
    float* x32 = reinterpret_cast<float*>(base + x32_offset_);
    float* w32 = reinterpret_cast<float*>(base + w32_offset_);
    float* sum32 = reinterpret_cast<float*>(base + sum32_offset_);
    CHORUS_RETURN_IF_ERROR(HalfToFloat(d, x, x32, static_cast<size_t>(s.n) * s.c * s.h * s.w));
    CHORUS_RETURN_IF_ERROR(HalfToFloat(d, w, w32, static_cast<size_t>(s.k) * s.c * s.r * s.s));
    const float one = 1.0f, zero = 0.0f;  // sum32 = conv(x32, w32), not read
    CHORUS_CUDNN_RETURN_IF_ERROR(
        cudnnConvolutionForward(d.impl().cudnn, &one, x32_, x32, w32_, w32, conv32_, fwd_algo_,
                                workspace, algo_workspace_, &zero, y32_, sum32),
        "cudnnConvolutionForward");
    const size_t plane = static_cast<size_t>(s.OutH()) * s.OutW();
    return conv_kernels::BiasToHalf(d.impl(), s.n, s.k, plane, sum32, b, y);
  }

  Status Backward(Device& d, const Half* x, const Half* w, const Half* dy, Half* dx, Half* dw,
                  Half* db, void* workspace) override {
    if (workspace == nullptr) {
      return InvalidArgument("ConvPlan::Backward: no workspace (" + std::to_string(workspace_) +
                             " bytes needed) for " + Describe(shape_));
    }
    cudnnHandle_t handle = d.impl().cudnn;
    const float one = 1.0f, zero = 0.0f;
    const Conv2dShape& s = shape_;
    if (db != nullptr) {
      auto* partial = reinterpret_cast<double*>(static_cast<std::byte*>(workspace) + bias_offset_);
      CHORUS_RETURN_IF_ERROR(conv_kernels::BiasGradient(
          d.impl(), s.n, s.k, static_cast<size_t>(s.OutH()) * s.OutW(), dy, partial, db));
    }
    if (dw != nullptr) {
      CHORUS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardFilter(handle, &one, x_, x, y_, dy, conv_, bwd_filter_algo_,
                                         workspace, algo_workspace_, &zero, w_, dw),
          "cudnnConvolutionBackwardFilter");
    }
    if (dx != nullptr) {
      CHORUS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardData(handle, &one, w_, w, y_, dy, conv_, bwd_data_algo_,
                                       workspace, algo_workspace_, &zero, x_, dx),
          "cudnnConvolutionBackwardData");
    }
    return Status::Ok();
  }

 private:
  Conv2dShape shape_;
  // FP16 (backward) and FP32 (forward) views of x, w, y and the convolution.
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnTensorDescriptor_t x32_ = nullptr, y32_ = nullptr;
  cudnnFilterDescriptor_t w32_ = nullptr;
  cudnnConvolutionDescriptor_t conv32_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t algo_workspace_ = 0;  // the largest of the three algorithms' workspaces
  size_t x32_offset_ = 0, w32_offset_ = 0, sum32_offset_ = 0, bias_offset_ = 0;
  size_t workspace_ = 0;       // all of it (LayOutWorkspace)
};

}  // namespace

Result<std::unique_ptr<ConvPlan>> ConvPlan::Create(Device& d, const Conv2dShape& shape) {
  auto plan = std::make_unique<CudnnConvPlan>(shape);
  CHORUS_RETURN_IF_ERROR(plan->Init(d));
  return std::unique_ptr<ConvPlan>(std::move(plan));
}

}  // namespace chorus::kernels::cuda
