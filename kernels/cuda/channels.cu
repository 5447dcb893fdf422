// Per-channel work over NCHW activations x [N, C, HW] on own kernels: spatial
// BatchNorm (BatchNormPlan) and the convolution bias gradient (ConvPlan's
// db). cuDNN's legacy NCHW BatchNorm and bias-gradient kernels ran at about a
// tenth of the memory bandwidth on sm_90 (docs/gpu.md); these are streaming
// passes that read each tensor once per pass.
//
// Reductions: block (s, c) of the grid [splits, C] sums channel c over the
// planes n = s, s + splits, ... in double (the CPU reference sums in double;
// FP64 is cheap on sm_90 and hidden under the loads), and a per-channel
// kernel adds the splits' partials in order. No atomics and a fixed order:
// two runs give the same bits.
//
// BatchNorm as kernels::BatchNorm* (kernels/cpu/batch_norm.cc), whose two
// passes (the mean, then (x - mean)^2) become one over x - k, k the channel's
// first element: mean = k + S1 / m, var = S2 / m - (S1 / m)^2 in double. The
// shift keeps the cancellation small: |mean - k| <= sqrt(m var), so the
// variance loses at most m * 2^-52 of itself. y = (x - mean) * scale + shift,
// scale = gamma * inv_std, in
// FP32 and rounded once to FP16; the running statistics move towards the mean
// and the unbiased variance var * m / (m - 1); backward
// dx = a dy + b (x - mean) + d with the per-channel constants folded in double.
//
// Each launcher enqueues on the device's stream; nothing allocates after the
// plan's Create (graph capture forbids it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

using half_bits::F2H;
using half_bits::H2F;

constexpr unsigned kChannelThreads = 128;
constexpr unsigned kChannelWarps = kChannelThreads / 32;
constexpr unsigned kAllLanes = 0xffffffffu;
// The reductions' grid is [splits, C]: a grid's y extent is at most 65535.
constexpr int kMaxChannels = 65535;

enum class SumOf : int {
  kX,          // a = sum x
  kShifted,    // a = sum (x - k), b = sum (x - k)^2, k = x[0, c, 0]
  kGradients,  // a = sum dy, b = sum dy (x - mean), mean = saved_mean[c]
};

// The block's sum of v in a fixed order, in thread 0. Every thread calls it.
__device__ double BlockSum(double v, double* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(kAllLanes, v, offset);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (unsigned w = 0; w < kChannelWarps; ++w) total += shared[w];
  }
  __syncthreads();  // shared is free again
  return total;
}

// V consecutive FP16 values as one aligned load or store.
template <int V>
struct alignas(2 * V) Halves {
  uint16_t v[V];
};

// f(x bits, dy bits) over one plane of hw elements, the block's threads
// striding over it V values at a time (hw a multiple of V, both planes aligned
// to 2V bytes: wide loads keep enough bytes in flight to reach the memory's
// bandwidth). dy may be null (f gets 0).
template <int V, typename F>
__device__ __forceinline__ void ForPlane(const uint16_t* x, const uint16_t* dy, int hw, F&& f) {
  const auto* xv = reinterpret_cast<const Halves<V>*>(x);
  const auto* gv = reinterpret_cast<const Halves<V>*>(dy);
  for (int j = threadIdx.x; j < hw / V; j += kChannelThreads) {
    const Halves<V> a = xv[j];
    const Halves<V> g = dy != nullptr ? gv[j] : Halves<V>{};
#pragma unroll
    for (int k = 0; k < V; ++k) f(a.v[k], g.v[k]);
  }
}

// Block (s, c): partial_a[c * splits + s], and partial_b unless kX.
template <int V>
__global__ void ChannelSumsKernel(SumOf what, int n, int channels, int hw, int splits,
                                  const uint16_t* __restrict__ x, const uint16_t* __restrict__ dy,
                                  const float* __restrict__ saved_mean,
                                  double* __restrict__ partial_a, double* __restrict__ partial_b) {
  __shared__ double shared[kChannelWarps];
  const int s = static_cast<int>(blockIdx.x), c = static_cast<int>(blockIdx.y);
  double mean = 0.0;  // the shift k, or the saved mean
  if (what == SumOf::kShifted) {
    mean = H2F(x[static_cast<size_t>(c) * hw]);
  } else if (what == SumOf::kGradients) {
    mean = static_cast<double>(saved_mean[c]);
  }
  double a = 0.0, b = 0.0;
  for (int i = s; i < n; i += splits) {
    const size_t offset = (static_cast<size_t>(i) * channels + c) * hw;
    ForPlane<V>(x + offset, dy != nullptr ? dy + offset : nullptr, hw, [&](uint16_t xv, uint16_t gv) {
      const double v = H2F(xv);
      if (what == SumOf::kX) {
        a += v;
      } else if (what == SumOf::kShifted) {
        a += v - mean;
        b += (v - mean) * (v - mean);
      } else {
        const double g = H2F(gv);
        a += g;
        b += g * (v - mean);
      }
    });
  }
  a = BlockSum(a, shared);
  if (what != SumOf::kX) b = BlockSum(b, shared);
  if (threadIdx.x == 0) {
    partial_a[c * splits + s] = a;
    if (what != SumOf::kX) partial_b[c * splits + s] = b;
  }
}

__device__ __forceinline__ double SplitsSum(const double* partial, int c, int splits) {
  double sum = 0.0;
  for (int i = 0; i < splits; ++i) sum += partial[c * splits + i];
  return sum;
}

// The per-channel constants of ApplyKernel: {a, b, d, center}.
struct Affine {
  float a, b, d, center;
};

__global__ void TrainStatsKernel(int channels, int hw, int splits, double m, double eps,
                                 double momentum, const uint16_t* __restrict__ x,
                                 const double* __restrict__ sums, const double* __restrict__ squares,
                                 const float* __restrict__ gamma, const float* __restrict__ beta,
                                 float* __restrict__ save_mean, float* __restrict__ save_inv_std,
                                 float* __restrict__ running_mean, float* __restrict__ running_var,
                                 Affine* __restrict__ affine) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    const double shifted_mean = SplitsSum(sums, c, splits) / m;
    const double mean = H2F(x[static_cast<size_t>(c) * hw]) + shifted_mean;
    const double var = fmax(SplitsSum(squares, c, splits) / m - shifted_mean * shifted_mean, 0.0);
    const double inv_std = 1.0 / sqrt(var + eps);
    save_mean[c] = static_cast<float>(mean);
    save_inv_std[c] = static_cast<float>(inv_std);
    if (running_mean != nullptr && running_var != nullptr) {
      const double unbiased = m > 1.0 ? var * m / (m - 1.0) : var;
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
    affine[c] = Affine{0.0f, static_cast<float>(static_cast<double>(gamma[c]) * inv_std), beta[c],
                       static_cast<float>(mean)};
  }
}

__global__ void EvalStatsKernel(int channels, double eps, const float* __restrict__ gamma,
                                const float* __restrict__ beta,
                                const float* __restrict__ running_mean,
                                const float* __restrict__ running_var,
                                Affine* __restrict__ affine) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    const double inv_std = 1.0 / sqrt(static_cast<double>(running_var[c]) + eps);
    affine[c] = Affine{0.0f, static_cast<float>(static_cast<double>(gamma[c]) * inv_std), beta[c],
                       running_mean[c]};
  }
}

__global__ void BackwardStatsKernel(int channels, int splits, double m,
                                    const double* __restrict__ dy_sums,
                                    const double* __restrict__ dy_xmu_sums,
                                    const float* __restrict__ gamma,
                                    const float* __restrict__ save_mean,
                                    const float* __restrict__ save_inv_std,
                                    float* __restrict__ dgamma, float* __restrict__ dbeta,
                                    Affine* __restrict__ affine) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    const double inv_std = static_cast<double>(save_inv_std[c]);
    const double sum_dy = SplitsSum(dy_sums, c, splits);
    const double sum_dy_xhat = SplitsSum(dy_xmu_sums, c, splits) * inv_std;
    dbeta[c] = static_cast<float>(sum_dy);
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    const double k = static_cast<double>(gamma[c]) * inv_std;
    affine[c] = Affine{static_cast<float>(k), static_cast<float>(-k * sum_dy_xhat * inv_std / m),
                       static_cast<float>(-k * sum_dy / m), save_mean[c]};
  }
}

__global__ void BiasGradientKernel(int channels, int splits, const double* __restrict__ sums,
                                   uint16_t* __restrict__ db) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    db[c] = F2H(static_cast<float>(SplitsSum(sums, c, splits)));
  }
}

// Block p = plane (n, c): out = a * dy + b * (x - center) + d in FP32 (dy null:
// no a * dy term), rounded once, V values at a time as ForPlane. dy and out may
// alias (each element is read before it is written, by the same thread).
template <int V>
__global__ void ApplyKernel(int channels, int hw, const uint16_t* __restrict__ x, const uint16_t* dy,
                            const Affine* __restrict__ affine, uint16_t* out) {
  const size_t plane = blockIdx.x;
  const Affine k = affine[plane % static_cast<size_t>(channels)];
  const size_t offset = plane * static_cast<size_t>(hw);
  const bool with_dy = dy != nullptr;
  const auto* xv = reinterpret_cast<const Halves<V>*>(x + offset);
  const auto* gv = reinterpret_cast<const Halves<V>*>(with_dy ? dy + offset : nullptr);
  auto* ov = reinterpret_cast<Halves<V>*>(out + offset);
  for (int j = threadIdx.x; j < hw / V; j += kChannelThreads) {
    const Halves<V> a = xv[j];
    const Halves<V> g = with_dy ? gv[j] : Halves<V>{};
    Halves<V> o;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float v = __fmul_rn(k.b, __fsub_rn(H2F(a.v[i]), k.center));
      if (with_dy) v = __fadd_rn(__fmul_rn(k.a, H2F(g.v[i])), v);
      o.v[i] = F2H(__fadd_rn(v, k.d));
    }
    ov[j] = o;
  }
}

const uint16_t* Bits(const Half* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* Bits(Half* p) { return reinterpret_cast<uint16_t*>(p); }

bool Aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The widest V in {8, 4, 2, 1} that divides hw with every tensor aligned to 2V
// bytes (plane starts are then aligned too).
int VectorWidth(int hw, const void* a, const void* b = nullptr, const void* c = nullptr) {
  for (int v : {8, 4, 2}) {
    const size_t bytes = 2 * static_cast<size_t>(v);
    if (hw % v == 0 && Aligned(a, bytes) && Aligned(b, bytes) && Aligned(c, bytes)) return v;
  }
  return 1;
}

// launch(std::integral_constant<int, V>) for the runtime width v.
template <typename Launch>
void WithWidth(int v, const Launch& launch) {
  switch (v) {
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
}

unsigned ChannelBlocks(int channels) {
  return static_cast<unsigned>(std::min((channels + 255) / 256, 1024));
}

Status LaunchSums(Device::Impl& impl, SumOf what, const BatchNormShape& s, int splits,
                  const Half* x, const Half* dy, const float* saved_mean, double* partial_a,
                  double* partial_b) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(s.c));
  WithWidth(VectorWidth(s.hw, x, dy), [&](auto v) {
    ChannelSumsKernel<decltype(v)::value><<<grid, kChannelThreads, 0, impl.stream>>>(
        what, s.n, s.c, s.hw, splits, Bits(x), Bits(dy), saved_mean, partial_a, partial_b);
  });
  return LaunchStatus("ChannelSumsKernel");
}

Status LaunchApply(Device::Impl& impl, const BatchNormShape& s, const Half* x, const Half* dy,
                   const Affine* affine, Half* out) {
  const unsigned planes = static_cast<unsigned>(static_cast<size_t>(s.n) * s.c);
  WithWidth(VectorWidth(s.hw, x, dy, out), [&](auto v) {
    ApplyKernel<decltype(v)::value><<<planes, kChannelThreads, 0, impl.stream>>>(
        s.c, s.hw, Bits(x), Bits(dy), affine, Bits(out));
  });
  return LaunchStatus("ApplyKernel");
}

std::string Describe(const BatchNormShape& s) {
  return "batchnorm N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
         " HW=" + std::to_string(s.hw);
}

class ChannelBatchNormPlan final : public BatchNormPlan {
 public:
  ChannelBatchNormPlan(const BatchNormShape& shape, int splits) : shape_(shape), splits_(splits) {}

  Status Init(Device& d) {
    const size_t per = static_cast<size_t>(shape_.c) * static_cast<size_t>(splits_);
    CHORUS_ASSIGN_OR_RETURN(partials_, DeviceArray<double>::Create(d, 2 * per));
    CHORUS_ASSIGN_OR_RETURN(affine_, DeviceArray<float>::Create(d, 4 * static_cast<size_t>(shape_.c)));
    return Status::Ok();
  }

  const BatchNormShape& shape() const override { return shape_; }

  Status ForwardTrain(Device& d, const Half* x, const float* gamma, const float* beta, Half* y,
                      float* save_mean, float* save_inv_std, float* running_mean,
                      float* running_var) override {
    if (save_mean == nullptr || save_inv_std == nullptr) {
      return InvalidArgument("BatchNormPlan::ForwardTrain: save_mean and save_inv_std are required");
    }
    Device::Impl& impl = d.impl();
    CHORUS_RETURN_IF_ERROR(
        LaunchSums(impl, SumOf::kShifted, shape_, splits_, x, nullptr, nullptr, Part(0), Part(1)));
    TrainStatsKernel<<<ChannelBlocks(shape_.c), 256, 0, impl.stream>>>(
        shape_.c, shape_.hw, splits_, M(), shape_.eps, shape_.momentum, Bits(x), Part(0), Part(1),
        gamma, beta, save_mean, save_inv_std, running_mean, running_var, Coefficients());
    CHORUS_RETURN_IF_ERROR(LaunchStatus("TrainStatsKernel"));
    return LaunchApply(impl, shape_, x, nullptr, Coefficients(), y);
  }

  Status ForwardEval(Device& d, const Half* x, const float* gamma, const float* beta,
                     const float* running_mean, const float* running_var, Half* y) override {
    Device::Impl& impl = d.impl();
    EvalStatsKernel<<<ChannelBlocks(shape_.c), 256, 0, impl.stream>>>(
        shape_.c, shape_.eps, gamma, beta, running_mean, running_var, Coefficients());
    CHORUS_RETURN_IF_ERROR(LaunchStatus("EvalStatsKernel"));
    return LaunchApply(impl, shape_, x, nullptr, Coefficients(), y);
  }

  Status Backward(Device& d, const Half* x, const float* gamma, const float* save_mean,
                  const float* save_inv_std, const Half* dy, Half* dx, float* dgamma,
                  float* dbeta) override {
    if (dx == nullptr || dgamma == nullptr || dbeta == nullptr) {
      return InvalidArgument("BatchNormPlan::Backward: dx, dgamma and dbeta are required");
    }
    Device::Impl& impl = d.impl();
    CHORUS_RETURN_IF_ERROR(
        LaunchSums(impl, SumOf::kGradients, shape_, splits_, x, dy, save_mean, Part(0), Part(1)));
    BackwardStatsKernel<<<ChannelBlocks(shape_.c), 256, 0, impl.stream>>>(
        shape_.c, splits_, M(), Part(0), Part(1), gamma, save_mean, save_inv_std, dgamma, dbeta,
        Coefficients());
    CHORUS_RETURN_IF_ERROR(LaunchStatus("BackwardStatsKernel"));
    return LaunchApply(impl, shape_, x, dy, Coefficients(), dx);
  }

 private:
  double M() const { return static_cast<double>(shape_.n) * static_cast<double>(shape_.hw); }
  double* Part(int i) {
    return partials_.data() + static_cast<size_t>(i) * static_cast<size_t>(shape_.c) * splits_;
  }
  Affine* Coefficients() { return reinterpret_cast<Affine*>(affine_.data()); }

  BatchNormShape shape_;
  int splits_;
  DeviceArray<double> partials_;  // [2][C][splits]: the sums a and b of ChannelSumsKernel
  DeviceArray<float> affine_;     // [C] Affine
};

}  // namespace

// Splits per channel: about 16 blocks of kChannelThreads per multiprocessor in
// all (as many as one holds: loads in flight are what a streaming reduction
// needs), at most one per image.
int ChannelSplits(const Device::Impl& impl, int n, int channels) {
  const int sms = impl.sm_count > 0 ? impl.sm_count : 80;
  const int want = (16 * sms + channels - 1) / std::max(channels, 1);
  return std::clamp(want, 1, std::max(n, 1));
}

namespace conv_kernels {

// db [channels] (FP16) = per-channel sums of dy [n, channels, plane] in double,
// rounded once (as kernels::Conv2dBackward's bias). partial: channels * splits
// doubles (ChannelSplits).
Status BiasGradient(Device::Impl& impl, int n, int channels, size_t plane, const Half* dy,
                    double* partial, Half* db) {
  if (n <= 0 || channels <= 0 || plane == 0) return Status::Ok();
  if (channels > kMaxChannels || plane > 0x7fffffffu) {
    return InvalidArgument("conv bias gradient: " + std::to_string(channels) + " channels of " +
                           std::to_string(plane) + " elements (at most " + std::to_string(kMaxChannels) +
                           " channels, 2^31 elements)");
  }
  BatchNormShape s;
  s.n = n;
  s.c = channels;
  s.hw = static_cast<int>(plane);
  const int splits = ChannelSplits(impl, n, channels);
  CHORUS_RETURN_IF_ERROR(LaunchSums(impl, SumOf::kX, s, splits, dy, nullptr, nullptr, partial, nullptr));
  BiasGradientKernel<<<ChannelBlocks(channels), 256, 0, impl.stream>>>(channels, splits, partial,
                                                                       Bits(db));
  return LaunchStatus("BiasGradientKernel");
}

}  // namespace conv_kernels

Result<std::unique_ptr<BatchNormPlan>> BatchNormPlan::Create(Device& d,
                                                             const BatchNormShape& shape) {
  const BatchNormShape& s = shape;
  if (s.n <= 0 || s.c <= 0 || s.hw <= 0) {
    return Err(InvalidArgument("BatchNormPlan: invalid shape: " + Describe(s)));
  }
  if (static_cast<size_t>(s.n) * static_cast<size_t>(s.c) > 0x7fffffffu || s.c > kMaxChannels) {
    return Err(InvalidArgument("BatchNormPlan: more than 2^31 planes or " + std::to_string(kMaxChannels) +
                               " channels: " + Describe(s)));
  }
  if (!(s.eps > 0.0) || !std::isfinite(s.eps)) {
    return Err(InvalidArgument("BatchNormPlan: eps " + std::to_string(s.eps) + " must be > 0"));
  }
  if (!(s.momentum >= 0.0 && s.momentum <= 1.0)) {
    return Err(InvalidArgument("BatchNormPlan: momentum " + std::to_string(s.momentum) +
                           " must be in [0, 1]"));
  }
  auto plan = std::make_unique<ChannelBatchNormPlan>(s, ChannelSplits(d.impl(), s.n, s.c));
  CHORUS_RETURN_IF_ERROR(plan->Init(d));
  return std::unique_ptr<BatchNormPlan>(std::move(plan));
}

}  // namespace chorus::kernels::cuda
