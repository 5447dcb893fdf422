// Element-wise CUDA ops of kernels/cuda/ops.h: FP16 <-> FP32 casts, ReLU,
// max-pooling, softmax cross-entropy, gradient unscaling and finiteness checks.
//
// Each op reproduces its CPU reference (kernels/cpu/*.cc run on FP16 values)
// bit for bit where the reference is exact (casts, ReLU, max-pool, unscale)
// and up to the last bits of double-precision exp/log where it is not (the
// loss). Nothing here allocates or synchronises, so every op can be captured
// into a CUDA graph; scalars that change per step (loss scale, 1 / scale) are
// read from device memory.
//
// Casts: __float2half_rn / __half2float (round to nearest even; Inf and
// subnormals exact), except NaN, whose bits follow common/fp16.h (quiet, sign
// and top payload bits kept) rather than the hardware's canonical NaN.
//
// Streaming kernels load 4 elements per thread (16-byte float / 8-byte half
// vectors) when every pointer is aligned for it; the remainder, or everything
// when a pointer is not aligned, goes through the same kernel one element at a
// time. Grid-stride loops cover any count with a capped grid (GridFor).
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Elements per thread and loop iteration on the vector path.
constexpr int kVec = 4;

// ---- Exact conversions (as common/fp16.h) ----------------------------------------

using half_bits::F2H;
using half_bits::H2F;

__device__ __forceinline__ bool HalfNonFinite(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }
__device__ __forceinline__ bool FloatNonFinite(float f) {
  return (__float_as_uint(f) & 0x7f800000u) == 0x7f800000u;
}

// V consecutive elements as one aligned load / store.
template <int V>
struct alignas(4 * V) FloatVec {
  float v[V];
};
template <int V>
struct alignas(2 * V) HalfVec {
  uint16_t v[V];
};

__device__ __forceinline__ size_t ThreadIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GridStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- Streaming kernels: `groups` groups of V elements each -------------------------

// Rows of `groups` groups of V halves: group g of output row k is group g of
// table row rows[k]; thread k < n also copies row k's label.
template <int V>
__global__ void GatherRowsKernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ labels,
                                 size_t groups, const int32_t* __restrict__ rows, int n,
                                 uint16_t* __restrict__ out, int32_t* __restrict__ out_labels) {
  const size_t total = static_cast<size_t>(n) * groups;
  for (size_t i = ThreadIndex(); i < total; i += GridStride()) {
    const size_t k = i / groups;
    const size_t source = static_cast<size_t>(rows[k]) * groups + (i - k * groups);
    reinterpret_cast<HalfVec<V>*>(out)[i] = reinterpret_cast<const HalfVec<V>*>(table)[source];
  }
  for (size_t k = ThreadIndex(); k < static_cast<size_t>(n); k += GridStride()) out_labels[k] = labels[rows[k]];
}


template <int V>
__global__ void FloatToHalfKernel(const float* __restrict__ x, uint16_t* __restrict__ y,
                                  size_t groups) {
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const FloatVec<V> in = reinterpret_cast<const FloatVec<V>*>(x)[g];
    HalfVec<V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = F2H(in.v[k]);
    reinterpret_cast<HalfVec<V>*>(y)[g] = out;
  }
}

template <int V>
__global__ void HalfToFloatKernel(const uint16_t* __restrict__ x, float* __restrict__ y,
                                  size_t groups) {
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const HalfVec<V> in = reinterpret_cast<const HalfVec<V>*>(x)[g];
    FloatVec<V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = H2F(in.v[k]);
    reinterpret_cast<FloatVec<V>*>(y)[g] = out;
  }
}

// y_float may alias x (in-place rounding); y_half may be null.
template <int V>
__global__ void RoundToHalfKernel(const float* x, uint16_t* y_half, float* y_float,
                                  size_t groups) {
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const FloatVec<V> in = reinterpret_cast<const FloatVec<V>*>(x)[g];
    HalfVec<V> h;
    FloatVec<V> f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      h.v[k] = F2H(in.v[k]);
      f.v[k] = H2F(h.v[k]);
    }
    if (y_half != nullptr) reinterpret_cast<HalfVec<V>*>(y_half)[g] = h;
    if (y_float != nullptr) reinterpret_cast<FloatVec<V>*>(y_float)[g] = f;
  }
}

// y = x < 0 ? +0 : x, compared as FP32 (NaN and -0 pass through, as the CPU op).
template <int V>
__global__ void ReluForwardKernel(const uint16_t* x, uint16_t* y, size_t groups) {
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    HalfVec<V> v = reinterpret_cast<const HalfVec<V>*>(x)[g];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (H2F(v.v[k]) < 0.0f) v.v[k] = 0;
    }
    reinterpret_cast<HalfVec<V>*>(y)[g] = v;
  }
}

// dx = y > 0 ? dy : +0. dx may alias dy: each group is read before it is written.
template <int V>
__global__ void ReluBackwardKernel(const uint16_t* y, const uint16_t* dy, uint16_t* dx,
                                   size_t groups) {
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const HalfVec<V> yv = reinterpret_cast<const HalfVec<V>*>(y)[g];
    HalfVec<V> d = reinterpret_cast<const HalfVec<V>*>(dy)[g];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (!(H2F(yv.v[k]) > 0.0f)) d.v[k] = 0;
    }
    reinterpret_cast<HalfVec<V>*>(dx)[g] = d;
  }
}

// g32 = float(g16) * inv_scale; any Inf/NaN in g16 sets *nonfinite = 1.
template <int V>
__global__ void UnscaleKernel(const uint16_t* __restrict__ g16, const float* inv_scale,
                              float* __restrict__ g32, int32_t* nonfinite, size_t groups) {
  const float s = *inv_scale;
  bool bad = false;
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const HalfVec<V> in = reinterpret_cast<const HalfVec<V>*>(g16)[g];
    FloatVec<V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      bad |= HalfNonFinite(in.v[k]);
      out.v[k] = __fmul_rn(H2F(in.v[k]), s);
    }
    reinterpret_cast<FloatVec<V>*>(g32)[g] = out;
  }
  // Every writer stores the same value: the race is benign.
  if (bad) *nonfinite = 1;
}

template <int V>
__global__ void CheckFiniteKernel(const float* __restrict__ x, int32_t* nonfinite,
                                  size_t groups) {
  bool bad = false;
  for (size_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const FloatVec<V> in = reinterpret_cast<const FloatVec<V>*>(x)[g];
#pragma unroll
    for (int k = 0; k < V; ++k) bad |= FloatNonFinite(in.v[k]);
  }
  if (bad) *nonfinite = 1;
}

// Calls launch(V, offset, groups, grid) to run the kernel on elements
// [offset, offset + groups * V): V = kVec over the head when `vector_ok`, then
// V = 1 over whatever is left (or everything).
template <typename LaunchFn>
Status LaunchStreaming(Device& d, size_t count, bool vector_ok, const char* what,
                       LaunchFn&& launch) {
  const Device::Impl& impl = d.impl();
  size_t head = 0;
  if (vector_ok && count >= static_cast<size_t>(kVec)) {
    const size_t groups = count / kVec;
    launch(std::integral_constant<int, kVec>{}, size_t{0}, groups,
           GridFor(impl, groups, kThreads));
    head = groups * kVec;
  }
  if (count > head) {
    const size_t rest = count - head;
    launch(std::integral_constant<int, 1>{}, head, rest, GridFor(impl, rest, kThreads));
  }
  return LaunchStatus(what);
}

// ---- Max-pooling ----------------------------------------------------------------------

// The flat input index of the top-left element of output o's window.
__device__ __forceinline__ uint32_t WindowStart(uint32_t o, uint32_t plane_out, int out_w,
                                                uint32_t plane_in, int size, int w) {
  const uint32_t plane = o / plane_out;
  const uint32_t j = o - plane * plane_out;
  const uint32_t p = j / out_w;
  const uint32_t q = j - p * out_w;
  return plane * plane_in + p * size * w + q * size;
}

// One thread per output element: scans its size x size window row by row with
// a strict > (first maximum kept), as kernels/cpu/pooling.cc. Indices are
// 32-bit (the launchers check that the input fits the int32 argmax): 64-bit
// divisions per element made these kernels several times slower.
__global__ void MaxPoolForwardKernel(int size, int w, uint32_t plane_in, int out_h, int out_w,
                                     uint32_t total_out, const uint16_t* __restrict__ x,
                                     uint16_t* __restrict__ y, int32_t* __restrict__ argmax) {
  const uint32_t plane_out = static_cast<uint32_t>(out_h) * out_w;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total_out; o += gridDim.x * blockDim.x) {
    const uint32_t first = WindowStart(o, plane_out, out_w, plane_in, size, w);
    uint32_t best = first;
    float best_value = H2F(x[best]);
    for (int dr = 0; dr < size; ++dr) {
      const uint32_t row = first + dr * w;
      for (int ds = 0; ds < size; ++ds) {
        const float v = H2F(x[row + ds]);
        if (v > best_value) {
          best_value = v;
          best = row + ds;
        }
      }
    }
    y[o] = x[best];
    argmax[o] = static_cast<int32_t>(best);
  }
}

// One thread per output element writes its whole window: dx = dy at the
// window's argmax, +0 elsewhere (dy = -0 gives +0, as the CPU's 0 + dy). With
// size 2 and w even, each row of the window is one 32-bit store. Elements
// outside every window (H or W not divisible by size) are zeroed by the
// launcher first.
__global__ void MaxPoolBackwardKernel(int size, int w, uint32_t plane_in, int out_h, int out_w,
                                      uint32_t total_out, bool pairs, const uint16_t* __restrict__ dy,
                                      const int32_t* __restrict__ argmax,
                                      uint16_t* __restrict__ dx) {
  const uint32_t plane_out = static_cast<uint32_t>(out_h) * out_w;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total_out; o += gridDim.x * blockDim.x) {
    const uint32_t first = WindowStart(o, plane_out, out_w, plane_in, size, w);
    const uint32_t at = static_cast<uint32_t>(argmax[o]);
    const uint16_t value = dy[o] == 0x8000u ? uint16_t{0} : dy[o];
    for (int dr = 0; dr < size; ++dr) {
      const uint32_t row = first + dr * w;
      if (pairs) {
        const uint32_t word = (at == row ? value : 0u) | (at == row + 1 ? uint32_t{value} << 16 : 0u);
        reinterpret_cast<uint32_t*>(dx)[row / 2] = word;
      } else {
        for (int ds = 0; ds < size; ++ds) dx[row + ds] = at == row + ds ? value : uint16_t{0};
      }
    }
  }
}

// ---- Softmax cross-entropy ----------------------------------------------------------

// One block, so the loss sum has a fixed order without a workspace. Each row
// is handled by a group of `group` lanes (a power of two <= 32, inside one
// warp); the groups of the block take rows round-robin. Per row, in double as
// the CPU reference:
//   arg  = first maximal logit, NaN skipped, 0 when logit 0 is NaN (the CPU's
//          strict-> scan from index 0);
//   lse  = l[arg] + log(sum_j exp(l_j - l[arg]));   loss = lse - l[label];
//   dlogits_j = half(float(scale / N * (exp(l_j - lse) - [j == label]))).
// A label outside [0, classes) gives a NaN loss (and no correct count) rather
// than reading out of bounds. Lane sums use a fixed butterfly; each thread
// accumulates its rows in order; warps are summed in order: deterministic.
constexpr unsigned kSceThreads = 1024;
constexpr unsigned kFullMask = 0xffffffffu;

// The row's first maximal non-NaN logit over the lanes of one group (every
// lane of the warp calls it: it shuffles), as the index `arg` the CPU picks:
// 0 when there is none or when logit 0 is NaN.
__device__ __forceinline__ int GroupArgMax(const uint16_t* x, bool active, int classes, int group, int sub) {
  float best = 0.0f;
  int best_j = -1;
  for (int j = sub; active && j < classes; j += group) {
    const float v = H2F(x[j]);
    if (!isnan(v) && (best_j < 0 || v > best)) {
      best = v;
      best_j = j;
    }
  }
  for (int offset = group / 2; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, best, offset, group);
    const int other_j = __shfl_xor_sync(kFullMask, best_j, offset, group);
    if (other_j >= 0 && (best_j < 0 || other > best || (other == best && other_j < best_j))) {
      best = other;
      best_j = other_j;
    }
  }
  if (!active) return 0;
  return (best_j < 0 || isnan(H2F(x[0]))) ? 0 : best_j;
}

// sum_j exp(l_j - max) over the group's lanes (every lane calls it: it shuffles).
__device__ __forceinline__ double GroupExpSum(const uint16_t* x, bool active, int classes, int group, int sub,
                                              double max) {
  double sum = 0.0;
  for (int j = sub; active && j < classes; j += group) sum += exp(static_cast<double>(H2F(x[j])) - max);
  for (int offset = group / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset, group);
  return sum;
}

// This lane's share of the row's gradient: half(float(scale / N * (softmax - onehot))).
__device__ __forceinline__ void WriteRowGradient(const uint16_t* x, uint16_t* drow, int classes, int group, int sub,
                                                 double lse, int label, double grad_scale) {
  for (int j = sub; j < classes; j += group) {
    const double p = exp(static_cast<double>(H2F(x[j])) - lse);
    const double g = grad_scale * (p - (j == label ? 1.0 : 0.0));
    drow[j] = F2H(__double2float_rn(g));
  }
}

// Fixed-order block reduction: a shuffle tree per warp, then warps in order.
__device__ __forceinline__ void BlockSumInOrder(double my_loss, int my_correct, double* warp_loss,
                                                int* warp_correct, float* loss_sum, int32_t* correct) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  for (int offset = 16; offset > 0; offset >>= 1) {
    my_loss += __shfl_down_sync(kFullMask, my_loss, offset);
    my_correct += __shfl_down_sync(kFullMask, my_correct, offset);
  }
  if (lane == 0) {
    warp_loss[warp] = my_loss;
    warp_correct[warp] = my_correct;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int total_correct = 0;
    for (int k = 0; k < warps; ++k) {
      total += warp_loss[k];
      total_correct += warp_correct[k];
    }
    *loss_sum = static_cast<float>(total);
    *correct = total_correct;
  }
}

__global__ void __launch_bounds__(kSceThreads)
    SoftmaxCrossEntropyKernel(int n, int classes, int group, const uint16_t* __restrict__ logits,
                              const int32_t* __restrict__ labels, const float* scale,
                              uint16_t* __restrict__ dlogits, float* loss_sum,
                              int32_t* correct) {
  __shared__ double warp_loss[kSceThreads / 32];
  __shared__ int warp_correct[kSceThreads / 32];
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int groups_per_warp = 32 / group;
  const int sub = lane % group;
  const int group_in_warp = lane / group;
  double my_loss = 0.0;
  int my_correct = 0;
  if (n > 0 && classes > 0) {
    const double grad_scale = dlogits != nullptr ? static_cast<double>(*scale) / n : 0.0;
    // `base` is the same for all lanes of a warp, so every lane runs the same
    // iterations and reaches every shuffle; groups past the last row idle.
    for (int64_t base = static_cast<int64_t>(warp) * groups_per_warp; base < n;
         base += static_cast<int64_t>(warps) * groups_per_warp) {
      const int64_t row = base + group_in_warp;
      const bool active = row < n;
      const uint16_t* x = logits + (active ? row : 0) * static_cast<int64_t>(classes);
      const int arg = GroupArgMax(x, active, classes, group, sub);
      const double max = active ? static_cast<double>(H2F(x[arg])) : 0.0;
      const double sum = GroupExpSum(x, active, classes, group, sub, max);
      if (!active) continue;  // no shuffles below

      const double lse = max + log(sum);
      const int label = labels[row];
      const bool label_ok = label >= 0 && label < classes;
      if (sub == 0) {
        my_loss += label_ok ? lse - static_cast<double>(H2F(x[label]))
                            : __longlong_as_double(0x7ff8000000000000LL);
        my_correct += (label_ok && arg == label) ? 1 : 0;
      }
      if (dlogits != nullptr) {
        WriteRowGradient(x, dlogits + row * static_cast<int64_t>(classes), classes, group, sub, lse, label,
                         grad_scale);
      }
    }
  }
  BlockSumInOrder(my_loss, my_correct, warp_loss, warp_correct, loss_sum, correct);
}

// Lanes per row: about 4 logits per lane, a power of two in [1, 32].
int SceGroup(int classes) {
  const int64_t per = (static_cast<int64_t>(classes) + 3) / 4;
  int group = 1;
  while (group < 32 && group < per) group <<= 1;
  return group;
}

}  // namespace

// ---- Casts -------------------------------------------------------------------------------

Status FloatToHalf(Device& d, const float* x, Half* y, size_t count) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(x, 16) && Aligned(y, 8), "FloatToHalf",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        FloatToHalfKernel<decltype(v)::value>
            <<<grid, kThreads, 0, stream>>>(x + offset, y + offset, groups);
      });
}

Status HalfToFloat(Device& d, const Half* x, float* y, size_t count) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(x, 8) && Aligned(y, 16), "HalfToFloat",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        HalfToFloatKernel<decltype(v)::value>
            <<<grid, kThreads, 0, stream>>>(x + offset, y + offset, groups);
      });
}

Status RoundToHalf(Device& d, const float* x, Half* y_half, float* y_float, size_t count) {
  const cudaStream_t stream = d.impl().stream;
  const bool vector_ok = Aligned(x, 16) && Aligned(y_half, 8) && Aligned(y_float, 16);
  return LaunchStreaming(
      d, count, vector_ok, "RoundToHalf",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        RoundToHalfKernel<decltype(v)::value><<<grid, kThreads, 0, stream>>>(
            x + offset, y_half != nullptr ? y_half + offset : nullptr,
            y_float != nullptr ? y_float + offset : nullptr, groups);
      });
}

// ---- Gather from a data set on the device ---------------------------------------------

Status GatherRows(Device& d, const Half* table, const int32_t* labels, size_t row, const int32_t* rows,
                  int n, Half* out, int32_t* out_labels) {
  if (n <= 0 || row == 0) return Status::Ok();
  const size_t total = static_cast<size_t>(n) * row;
  // Four halves (8 bytes) per load where every row starts 8-byte aligned.
  if (row % kVec == 0 && Aligned(table, 8) && Aligned(out, 8)) {
    GatherRowsKernel<kVec><<<GridFor(d.impl(), total / kVec, kThreads), kThreads, 0, d.impl().stream>>>(
        table, labels, row / kVec, rows, n, out, out_labels);
  } else {
    GatherRowsKernel<1><<<GridFor(d.impl(), total, kThreads), kThreads, 0, d.impl().stream>>>(
        table, labels, row, rows, n, out, out_labels);
  }
  return LaunchStatus("GatherRows");
}

// ---- Activation and pooling -------------------------------------------------------------

Status ReluForward(Device& d, size_t count, const Half* x, Half* y) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(x, 8) && Aligned(y, 8), "ReluForward",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        ReluForwardKernel<decltype(v)::value>
            <<<grid, kThreads, 0, stream>>>(x + offset, y + offset, groups);
      });
}

Status ReluBackward(Device& d, size_t count, const Half* y, const Half* dy, Half* dx) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(y, 8) && Aligned(dy, 8) && Aligned(dx, 8), "ReluBackward",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        ReluBackwardKernel<decltype(v)::value>
            <<<grid, kThreads, 0, stream>>>(y + offset, dy + offset, dx + offset, groups);
      });
}

// The n images of c planes of h x w fit 32-bit indices and the int32 argmax.
Status CheckPoolInput(const char* what, size_t total) {
  if (total > static_cast<size_t>(INT32_MAX) + 1) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(total) +
                           " input elements do not fit the int32 argmax");
  }
  return Status::Ok();
}

Status MaxPoolForward(Device& d, int n, int c, int h, int w, int size, const Half* x, Half* y,
                      int32_t* argmax) {
  if (n <= 0 || c <= 0 || size <= 0) return Status::Ok();
  const int out_h = h / size, out_w = w / size;
  const size_t total_out = static_cast<size_t>(n) * c * static_cast<size_t>(out_h) * out_w;
  if (total_out == 0) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(
      CheckPoolInput("MaxPoolForward", static_cast<size_t>(n) * c * static_cast<size_t>(h) * w));
  MaxPoolForwardKernel<<<GridFor(d.impl(), total_out, kThreads), kThreads, 0, d.impl().stream>>>(
      size, w, static_cast<uint32_t>(h) * w, out_h, out_w, static_cast<uint32_t>(total_out), x, y,
      argmax);
  return LaunchStatus("MaxPoolForward");
}

Status MaxPoolBackward(Device& d, int n, int c, int h, int w, int size, const Half* dy,
                       const int32_t* argmax, Half* dx) {
  if (n <= 0 || c <= 0 || size <= 0) return Status::Ok();
  const size_t total_in = static_cast<size_t>(n) * c * static_cast<size_t>(h) * w;
  if (total_in == 0) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(CheckPoolInput("MaxPoolBackward", total_in));
  const int out_h = h / size, out_w = w / size;
  const cudaStream_t stream = d.impl().stream;
  if (h % size != 0 || w % size != 0 || out_h == 0 || out_w == 0) {
    CHORUS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dx, 0, total_in * sizeof(Half), stream),
                                "cudaMemsetAsync(MaxPoolBackward)");
  }
  const size_t total_out = static_cast<size_t>(n) * c * static_cast<size_t>(out_h) * out_w;
  if (total_out == 0) return Status::Ok();
  const bool pairs = size == 2 && w % 2 == 0 && Aligned(dx, 4);
  MaxPoolBackwardKernel<<<GridFor(d.impl(), total_out, kThreads), kThreads, 0, stream>>>(
      size, w, static_cast<uint32_t>(h) * w, out_h, out_w, static_cast<uint32_t>(total_out), pairs,
      dy, argmax, dx);
  return LaunchStatus("MaxPoolBackward");
}

// ---- Loss ----------------------------------------------------------------------------------

Status SoftmaxCrossEntropy(Device& d, int n, int classes, const Half* logits,
                           const int32_t* labels, const float* scale, Half* dlogits,
                           float* loss_sum, int32_t* correct) {
  // Launched even for n <= 0 or classes <= 0: it then writes 0 and 0.
  SoftmaxCrossEntropyKernel<<<1, kSceThreads, 0, d.impl().stream>>>(
      n, classes, SceGroup(classes), logits, labels, scale, dlogits, loss_sum, correct);
  return LaunchStatus("SoftmaxCrossEntropy");
}

// ---- Mixed precision -------------------------------------------------------------------------

Status UnscaleGradients(Device& d, size_t count, const Half* g16, const float* inv_scale,
                        float* g32, int32_t* nonfinite) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(g16, 8) && Aligned(g32, 16), "UnscaleGradients",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        UnscaleKernel<decltype(v)::value><<<grid, kThreads, 0, stream>>>(
            g16 + offset, inv_scale, g32 + offset, nonfinite, groups);
      });
}

Status CheckFinite(Device& d, size_t count, const float* x, int32_t* nonfinite) {
  const cudaStream_t stream = d.impl().stream;
  return LaunchStreaming(
      d, count, Aligned(x, 16), "CheckFinite",
      [&](auto v, size_t offset, size_t groups, unsigned grid) {
        CheckFiniteKernel<decltype(v)::value>
            <<<grid, kThreads, 0, stream>>>(x + offset, nonfinite, groups);
      });
}

}  // namespace chorus::kernels::cuda
