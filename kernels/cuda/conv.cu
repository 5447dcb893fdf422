// The small own kernel behind the cuDNN convolution of cudnn_ops.cc: the FP32
// convolution sum plus the FP16 bias, rounded once to FP16 (the forward pass's
// output, as kernels::Conv2dForward computes it in the CPU model's FP16 mode).
//
// The launcher is declared again in cudnn_ops.cc (namespace conv_kernels);
// nothing else calls it. It enqueues on the device's stream and returns the
// launch status. Nothing here allocates.
#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/internal.h"

namespace chorus::kernels::cuda {
namespace {

using half_bits::F2H;
using half_bits::H2F;

// y [planes * plane] = half(sum + bias[channel of the plane]); bias may be null.
// Index is uint32_t where the tensor allows (64-bit divisions per element cost
// more than the memory traffic).
template <typename Index>
__global__ void BiasToHalfKernel(Index count, Index plane, Index channels,
                                 const float* __restrict__ sum, const uint16_t* __restrict__ bias,
                                 uint16_t* __restrict__ y) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const float v = sum[i];
    y[i] = F2H(bias != nullptr ? v + H2F(bias[(i / plane) % channels]) : v);
  }
}

constexpr unsigned kThreads = 256;

}  // namespace

namespace conv_kernels {

// y [n, channels, plane] (FP16) = sum [n, channels, plane] (FP32) + bias [channels]
// (FP16, nullptr: none), added in FP32 and rounded once.
Status BiasToHalf(Device::Impl& impl, int n, int channels, size_t plane, const float* sum,
                  const Half* bias, Half* y) {
  if (n <= 0 || channels <= 0 || plane == 0) return Status::Ok();
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(channels) * plane;
  const unsigned grid = GridFor(impl, count, kThreads);
  if (count <= UINT32_MAX) {
    BiasToHalfKernel<uint32_t><<<grid, kThreads, 0, impl.stream>>>(
        static_cast<uint32_t>(count), static_cast<uint32_t>(plane), static_cast<uint32_t>(channels),
        sum, bias, y);
  } else {
    BiasToHalfKernel<size_t><<<grid, kThreads, 0, impl.stream>>>(
        count, plane, static_cast<size_t>(channels), sum, bias, y);
  }
  return LaunchStatus("BiasToHalfKernel");
}

}  // namespace conv_kernels
}  // namespace chorus::kernels::cuda
