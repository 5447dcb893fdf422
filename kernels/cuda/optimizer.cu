// FusedOptimizer (kernels/cuda/ops.h): the LARS / SGD-with-momentum update of
// trainer/optimizer.cc over every tensor of the FP32 master in two launches,
// writing the FP16 working copy in the same pass. Must not decide whether a
// step happens (the loss scaler does) and must not allocate in Step (graph
// capture).
//
// The tensors are cut at Create into chunks of at most kChunk floats, each
// inside one tensor; chunk c of tensor t is chunks_[tensors_[t].first_chunk + c].
//   Launch 1 (LARS only), one block per chunk: partial[chunk] = (sum w^2,
//     sum g^2) in double over the chunk, each thread summing its strided
//     elements in order, then a fixed shuffle tree and the warps in order.
//   Launch 2, one block per chunk: warp 0 combines the partials of the chunk's
//     tensor (lane k sums chunks k, k + 32, ... in order, then a fixed
//     butterfly), so every block of a tensor computes the same local_lr:
//       local_lr = eta * ||w|| / (||g|| + wd * ||w||)  (decayed tensors, LARS,
//                  both norms > 0), else 1;
//     then updates its chunk exactly as the CPU optimizer, in FP32 with
//     separately rounded products and sums (no FMA contraction):
//       LARS: v = momentum * v + float(lr * local_lr) * (g + wd * w);  w -= v
//       SGD:  v = momentum * v + (g + wd * w);                      w -= lr * v
//     (wd = 0 on tensors that are not decayed), and writes
//     working_half = half(w) and working_float = float(half(w)).
//   The first block of each tensor stores its local_lr for LastLocalLr.
// The learning rate is read from device memory inside launch 2, so a captured
// graph replays with the current value.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr size_t kChunk = 4096;  // floats per chunk (16 per thread)
constexpr unsigned kFullMask = 0xffffffffu;

struct ChunkInfo {
  size_t begin;    // first float of the chunk (into master / gradients / momentum)
  uint32_t count;  // floats, 1..kChunk
  int32_t tensor;  // index into the tensor table
};

struct TensorInfo {
  int32_t first_chunk;
  int32_t num_chunks;
  int32_t decayed;  // weight decay and the LARS trust ratio apply
};

struct UpdateOptions {
  int32_t lars;
  float momentum;
  float weight_decay;
  float eta;
};

// common/fp16.h bits (half_bits.cuh).
using half_bits::F2H;
using half_bits::H2F;

// Launch 1: partial[b] = (sum w^2, sum g^2) over chunk b, for decayed tensors.
__global__ void __launch_bounds__(kThreads)
    SquaredNormsKernel(const ChunkInfo* __restrict__ chunks, const TensorInfo* __restrict__ tensors,
                       const float* __restrict__ master, const float* __restrict__ gradients,
                       double2* __restrict__ partial) {
  __shared__ double warp_w[kThreads / 32];
  __shared__ double warp_g[kThreads / 32];
  const ChunkInfo chunk = chunks[blockIdx.x];
  if (!tensors[chunk.tensor].decayed) return;  // the whole block: no barrier skipped
  const float* w = master + chunk.begin;
  const float* g = gradients + chunk.begin;
  double sw = 0.0, sg = 0.0;
  for (uint32_t i = threadIdx.x; i < chunk.count; i += blockDim.x) {
    const double a = w[i], b = g[i];
    sw += a * a;
    sg += b * b;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    sw += __shfl_down_sync(kFullMask, sw, offset);
    sg += __shfl_down_sync(kFullMask, sg, offset);
  }
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_w[warp] = sw;
    warp_g[warp] = sg;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double tw = 0.0, tg = 0.0;
    for (unsigned k = 0; k < blockDim.x / 32; ++k) {
      tw += warp_w[k];
      tg += warp_g[k];
    }
    partial[blockIdx.x] = make_double2(tw, tg);
  }
}

// Launch 2: local_lr of the chunk's tensor, then the update of the chunk.
__global__ void __launch_bounds__(kThreads)
    UpdateKernel(const ChunkInfo* __restrict__ chunks, const TensorInfo* __restrict__ tensors,
                 const double2* __restrict__ partial, UpdateOptions options, const float* lr_ptr,
                 float* __restrict__ master, const float* __restrict__ gradients,
                 float* __restrict__ momentum, uint16_t* __restrict__ working_half,
                 float* __restrict__ working_float, double* __restrict__ local_lr_out) {
  __shared__ double s_local_lr;
  const ChunkInfo chunk = chunks[blockIdx.x];
  const TensorInfo tensor = tensors[chunk.tensor];
  const bool decayed = tensor.decayed != 0;
  const double wd = static_cast<double>(options.weight_decay);
  if (options.lars && decayed) {
    if (threadIdx.x < 32) {
      double sw = 0.0, sg = 0.0;
      for (int k = static_cast<int>(threadIdx.x); k < tensor.num_chunks; k += 32) {
        const double2 p = partial[tensor.first_chunk + k];
        sw += p.x;
        sg += p.y;
      }
      for (int offset = 16; offset > 0; offset >>= 1) {
        sw += __shfl_xor_sync(kFullMask, sw, offset);
        sg += __shfl_xor_sync(kFullMask, sg, offset);
      }
      if (threadIdx.x == 0) {
        const double w_norm = sqrt(sw);
        const double g_norm = sqrt(sg);
        // eta * ||w|| / (||g|| + wd * ||w||), each operation rounded to nearest (no
        // FMA). eta and wd arrive as floats (the CPU uses the doubles), so local_lr
        // may differ from the CPU's in the last bits.
        s_local_lr = (w_norm > 0.0 && g_norm > 0.0)
                         ? __ddiv_rn(__dmul_rn(static_cast<double>(options.eta), w_norm),
                                     __dadd_rn(g_norm, __dmul_rn(wd, w_norm)))
                         : 1.0;
      }
    }
  } else if (threadIdx.x == 0) {
    s_local_lr = 1.0;
  }
  __syncthreads();
  const double local_lr = s_local_lr;
  if (threadIdx.x == 0 && static_cast<int32_t>(blockIdx.x) == tensor.first_chunk) {
    local_lr_out[chunk.tensor] = local_lr;
  }

  const float lr = *lr_ptr;
  const float m = options.momentum;
  const float tensor_wd = decayed ? options.weight_decay : 0.0f;
  // LARS: float(lr * local_lr) as the CPU's static_cast<float>(double(lr) * local_lr).
  const float coeff = static_cast<float>(static_cast<double>(lr) * local_lr);
  float* w = master + chunk.begin;
  const float* g = gradients + chunk.begin;
  float* v = momentum + chunk.begin;
  uint16_t* wh = working_half != nullptr ? working_half + chunk.begin : nullptr;
  float* wf = working_float != nullptr ? working_float + chunk.begin : nullptr;
  for (uint32_t i = threadIdx.x; i < chunk.count; i += blockDim.x) {
    const float wi = w[i];
    const float step = __fadd_rn(g[i], __fmul_rn(tensor_wd, wi));  // g + wd * w
    float vi = __fmul_rn(m, v[i]);
    float wn;
    if (options.lars) {
      vi = __fadd_rn(vi, __fmul_rn(coeff, step));
      wn = __fsub_rn(wi, vi);
    } else {
      vi = __fadd_rn(vi, step);
      wn = __fsub_rn(wi, __fmul_rn(lr, vi));
    }
    v[i] = vi;
    w[i] = wn;
    const uint16_t h = F2H(wn);
    if (wh != nullptr) wh[i] = h;
    if (wf != nullptr) wf[i] = H2F(h);
  }
}

class FusedOptimizerImpl final : public FusedOptimizer {
 public:
  FusedOptimizerImpl(const FusedOptimizerOptions& options, size_t num_chunks,
                     DeviceArray<ChunkInfo> chunks, DeviceArray<TensorInfo> tensors,
                     DeviceArray<double2> partial, DeviceArray<double> local_lr)
      : options_(options),
        num_chunks_(num_chunks),
        chunks_(std::move(chunks)),
        tensors_(std::move(tensors)),
        partial_(std::move(partial)),
        local_lr_(std::move(local_lr)) {}

  Status Step(Device& d, const float* lr, float* master, const float* gradients, float* momentum,
              Half* working_half, float* working_float) override {
    if (num_chunks_ == 0) return Status::Ok();
    const cudaStream_t stream = d.impl().stream;
    const unsigned grid = static_cast<unsigned>(num_chunks_);
    if (options_.lars) {
      SquaredNormsKernel<<<grid, kThreads, 0, stream>>>(chunks_.data(), tensors_.data(), master,
                                                         gradients, partial_.data());
      CHORUS_RETURN_IF_ERROR(LaunchStatus("FusedOptimizer norms"));
    }
    UpdateOptions o;
    o.lars = options_.lars ? 1 : 0;
    o.momentum = options_.momentum;
    o.weight_decay = options_.weight_decay;
    o.eta = options_.eta;
    UpdateKernel<<<grid, kThreads, 0, stream>>>(chunks_.data(), tensors_.data(), partial_.data(),
                                                o, lr, master, gradients, momentum, working_half,
                                                working_float, local_lr_.data());
    return LaunchStatus("FusedOptimizer update");
  }

  Result<std::vector<double>> LastLocalLr(Device& d) override {
    std::vector<double> host(local_lr_.size());
    CHORUS_RETURN_IF_ERROR(d.CopyToHost(host.data(), local_lr_.data(), local_lr_.bytes()));
    CHORUS_RETURN_IF_ERROR(d.Synchronize("FusedOptimizer::LastLocalLr"));
    return host;
  }

 private:
  FusedOptimizerOptions options_;
  size_t num_chunks_;
  DeviceArray<ChunkInfo> chunks_;
  DeviceArray<TensorInfo> tensors_;
  DeviceArray<double2> partial_;  // one per chunk (written for decayed tensors only)
  DeviceArray<double> local_lr_;  // one per tensor
};

}  // namespace

Result<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    Device& d, std::span<const TensorRange> tensors, const FusedOptimizerOptions& options) {
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f)) {
    return Err(InvalidArgument("FusedOptimizer: momentum must be in [0, 1), got " +
                               std::to_string(options.momentum)));
  }
  if (!(options.weight_decay >= 0.0f) || !std::isfinite(options.weight_decay)) {
    return Err(InvalidArgument("FusedOptimizer: weight_decay must be >= 0, got " +
                               std::to_string(options.weight_decay)));
  }
  if (options.lars && (!(options.eta > 0.0f) || !std::isfinite(options.eta))) {
    return Err(InvalidArgument("FusedOptimizer: LARS eta must be > 0, got " +
                               std::to_string(options.eta)));
  }
  if (tensors.size() > static_cast<size_t>(INT32_MAX)) {
    return Err(InvalidArgument("FusedOptimizer: too many tensors"));
  }
  // Ranges must not overlap (blocks of different tensors would race).
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorRange& r = tensors[t];
    if (r.offset + r.count < r.offset) {
      return Err(InvalidArgument("FusedOptimizer: tensor " + std::to_string(t) +
                                 " range overflows"));
    }
    if (r.count > 0) spans.emplace_back(r.offset, r.offset + r.count);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].first < spans[k - 1].second) {
      return Err(InvalidArgument("FusedOptimizer: tensor ranges [" +
                                 std::to_string(spans[k - 1].first) + ", " +
                                 std::to_string(spans[k - 1].second) + ") and [" +
                                 std::to_string(spans[k].first) + ", " +
                                 std::to_string(spans[k].second) + ") overlap"));
    }
  }

  std::vector<ChunkInfo> chunks;
  std::vector<TensorInfo> infos(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorRange& r = tensors[t];
    const size_t first = chunks.size();
    for (size_t begin = 0; begin < r.count; begin += kChunk) {
      ChunkInfo c;
      c.begin = r.offset + begin;
      c.count = static_cast<uint32_t>(std::min(kChunk, r.count - begin));
      c.tensor = static_cast<int32_t>(t);
      chunks.push_back(c);
    }
    if (chunks.size() > static_cast<size_t>(INT32_MAX)) {
      return Err(InvalidArgument("FusedOptimizer: too many chunks"));
    }
    infos[t].first_chunk = static_cast<int32_t>(first);
    infos[t].num_chunks = static_cast<int32_t>(chunks.size() - first);
    infos[t].decayed = r.decayed ? 1 : 0;
  }

  CHORUS_ASSIGN_OR_RETURN(auto chunk_array, DeviceArray<ChunkInfo>::Create(d, chunks.size()));
  CHORUS_ASSIGN_OR_RETURN(auto tensor_array, DeviceArray<TensorInfo>::Create(d, infos.size()));
  CHORUS_ASSIGN_OR_RETURN(auto partial_array, DeviceArray<double2>::Create(d, chunks.size()));
  CHORUS_ASSIGN_OR_RETURN(auto local_lr_array, DeviceArray<double>::Create(d, infos.size()));
  // 1 until a Step writes it (tensors without elements keep it, as on the CPU).
  const std::vector<double> ones(infos.size(), 1.0);
  CHORUS_RETURN_IF_ERROR(d.CopyToDevice(chunk_array.data(), chunks.data(), chunk_array.bytes()));
  CHORUS_RETURN_IF_ERROR(d.CopyToDevice(tensor_array.data(), infos.data(), tensor_array.bytes()));
  CHORUS_RETURN_IF_ERROR(d.CopyToDevice(local_lr_array.data(), ones.data(), local_lr_array.bytes()));
  // The host tables are freed on return: wait for the copies.
  CHORUS_RETURN_IF_ERROR(d.Synchronize("FusedOptimizer::Create"));
  return std::unique_ptr<FusedOptimizer>(
      new FusedOptimizerImpl(options, chunks.size(), std::move(chunk_array),
                             std::move(tensor_array), std::move(partial_array),
                             std::move(local_lr_array)));
}

}  // namespace chorus::kernels::cuda
