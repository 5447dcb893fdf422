// The gossip codecs on the device (kernels/cuda/ops.h): fp16, int8 (nearest),
// sign and top-k encoders and decoders whose payloads are byte-identical to
// gossip/codecs/codec_dense.cc, codec_sign.cc and codec_sparse.cc after the 16-byte
// header, so that a GPU node and a CPU node read each other's messages.
//
// Bit-exactness is the point of this file, so each kernel repeats the CPU
// code's arithmetic operation for operation, with explicit round-to-nearest
// intrinsics (__fdiv_rn, __ddiv_rn, __dmul_rn, __dadd_rn) so that neither
// contraction into FMA nor fast-math flags can change a bit. It must not be
// compiled with --use_fast_math / -ftz=true (subnormal magnitudes count):
//   fp16   FloatToHalfBits of common/fp16.h: round to nearest even (the
//          hardware conversion), NaN -> quiet NaN keeping sign and the top 10
//          payload bits (what both CPU paths, scalar and F16C, write).
//   int8   scale_c = max|x| / 127 in float (max is order independent, so a
//          tree is exact); q = rint(double(x) * (1.0 / double(scale_c))),
//          clamped to [-127, 127]; q = 0 in a chunk whose scale is 0 or not
//          finite. Only nearest rounding: the CPU's stochastic rounding draws
//          SplitMix64 in element order, which is sequential by nature, and is
//          not offered on the device.
//   sign   scale_c = float(sum_i double(|x_i|) / count) with the sum in double
//          IN INDEX ORDER (a tree sum of doubles rounds differently and may
//          change the last bit of the float). One lane of a warp sums each
//          chunk sequentially from a shared-memory tile that the whole warp
//          loads coalesced. Bits: element i in bit i % 8 of byte i / 8, set for
//          a set float sign bit (-0 and negative NaN included), which is bit
//          i % 32 of little-endian word i / 32: one warp ballot per word.
//   top-k  |x| as its float bits with NaN mapped to +Inf's (nonnegative
//          floats order as their bits), stable radix sort descending with the
//          indices as values (ties: lower index first, as the CPU's
//          comparator), the first k indices sorted ascending, then gathered.
// |x| with NaN counted as +Inf is the CPU's codec_wire::Magnitude.
//
// Work per chunk goes to one thread (chunk < 32) or one warp (chunk >= 32),
// so no kernel divides an element index by the chunk.
//
// Payload alignment: fp16 needs a 2-byte aligned payload, the others 4 bytes
// (a cudaMalloc'd message plus the 16-byte header is); misaligned payloads
// are rejected with kInvalidArgument. x must be 4-byte aligned (a float*).
//
// Decoders flag (never clear) *nonfinite on non-finite scales or values; they
// also set it for the payloads the CPU rejects as malformed (int8 q = -128, a
// negative scale, sign's unused last-byte bits not zero), so such a message is
// never mixed in. DecodeTopK's *bad covers indices out of range or not
// strictly ascending; non-finite top-k values are written as they are (the
// caller's CheckFinite over `out` catches them).
#include <cub/device/device_radix_sort.cuh>

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxChunk = 65536;
// Elements a warp stages per step of the sequential sign-scale sum.
constexpr unsigned kSumTile = 128;
// Top-k indices are u32 on the wire.
constexpr uint64_t kMaxSparseElements = uint64_t{1} << 32;

size_t NumChunks(size_t n, int chunk) {
  return chunk < 1 ? 0 : (n + static_cast<size_t>(chunk) - 1) / static_cast<size_t>(chunk);
}

Status CheckChunk(int chunk, const char* codec) {
  if (chunk >= 1 && chunk <= kMaxChunk) return Status::Ok();
  return InvalidArgument(std::string("cuda codec ") + codec +
                         ": chunk must be in [1, 65536], got " + std::to_string(chunk));
}

Status CheckAligned(const void* p, size_t alignment, const char* codec) {
  if (reinterpret_cast<uintptr_t>(p) % alignment == 0) return Status::Ok();
  return InvalidArgument(std::string("cuda codec ") + codec + ": payload must be " +
                         std::to_string(alignment) + "-byte aligned");
}

// ---- Shared device helpers ---------------------------------------------------------------

// codec_wire::Magnitude: |x| with NaN ordered above +Inf.
__device__ __forceinline__ float Magnitude(float x) { return isnan(x) ? INFINITY : fabsf(x); }

// The bits of Magnitude(x): nonnegative floats order as unsigned integers.
__device__ __forceinline__ uint32_t MagnitudeKey(float x) {
  const uint32_t abs = __float_as_uint(x) & 0x7fffffffu;
  return abs > 0x7f800000u ? 0x7f800000u : abs;
}

// common/fp16.h FloatToHalfBits (half_bits.cuh).
__device__ __forceinline__ uint16_t FloatToHalfBits(float f) { return half_bits::F2H(f); }

__device__ __forceinline__ bool HalfIsFinite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

// Global thread index and count of a grid-stride loop.
__device__ __forceinline__ size_t ThreadIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t ThreadCount() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// Chunk c of `chunk` elements in [0, n): [begin, end).
struct ChunkRange {
  size_t begin;
  size_t end;
};
__device__ __forceinline__ ChunkRange ChunkAt(size_t c, size_t chunk, size_t n) {
  const size_t begin = c * chunk;
  const size_t end = begin + chunk < n ? begin + chunk : n;
  return {begin, end};
}

__device__ __forceinline__ void Flag(int32_t* flag) { *flag = 1; }

// Launch geometry of a per-chunk kernel: kLanes (1 or 32) threads per chunk.
unsigned ChunkGrid(const Device::Impl& impl, size_t chunks, unsigned lanes) {
  return GridFor(impl, chunks * lanes, kThreads);
}

// Runs launch(lanes, grid) with the per-chunk kernels' lane count as a
// compile-time constant: one thread per chunk for chunks under a warp, one
// warp per chunk otherwise.
template <typename Launch>
void LaunchPerChunk(const Device::Impl& impl, size_t chunks, int chunk, const Launch& launch) {
  if (chunk < static_cast<int>(kWarp)) {
    launch(std::integral_constant<unsigned, 1>{}, ChunkGrid(impl, chunks, 1));
  } else {
    launch(std::integral_constant<unsigned, kWarp>{}, ChunkGrid(impl, chunks, kWarp));
  }
}

// ---- fp16 ---------------------------------------------------------------------------------

// out[i] = FloatToHalfBits(x[i]); four at a time when `vectorized` (x 16-byte
// and out 8-byte aligned), the tail one at a time.
__global__ void EncodeFp16Kernel(const float* __restrict__ x, size_t n,
                                 uint16_t* __restrict__ out, bool vectorized) {
  size_t done = 0;
  if (vectorized) {
    const size_t groups = n / 4;
    const auto* x4 = reinterpret_cast<const float4*>(x);
    auto* out4 = reinterpret_cast<ushort4*>(out);
    for (size_t g = ThreadIndex(); g < groups; g += ThreadCount()) {
      const float4 v = x4[g];
      out4[g] = make_ushort4(FloatToHalfBits(v.x), FloatToHalfBits(v.y), FloatToHalfBits(v.z),
                             FloatToHalfBits(v.w));
    }
    done = groups * 4;
  }
  for (size_t i = done + ThreadIndex(); i < n; i += ThreadCount()) out[i] = FloatToHalfBits(x[i]);
}

__global__ void DecodeFp16Kernel(const uint16_t* __restrict__ in, size_t n,
                                 float* __restrict__ out, int32_t* nonfinite) {
  bool bad = false;
  for (size_t i = ThreadIndex(); i < n; i += ThreadCount()) {
    const uint16_t h = in[i];
    bad |= !HalfIsFinite(h);
    out[i] = __half2float(__ushort_as_half(h));
  }
  if (bad) Flag(nonfinite);
}

// ---- int8 ---------------------------------------------------------------------------------

// codec_dense.cc nearest: rint(double(x) * inv) clamped to [-127, 127].
__device__ __forceinline__ int8_t QuantizeNearest(float x, double inv) {
  double v = rint(__dmul_rn(static_cast<double>(x), inv));
  v = fmin(fmax(v, -127.0), 127.0);
  return static_cast<int8_t>(static_cast<int>(v));
}

// One chunk per kLanes threads: the scale (max |x| / 127, reduced over the
// lanes: max is exact in any order), then the chunk's q in a second pass.
template <unsigned kLanes>
__global__ void EncodeInt8Kernel(const float* __restrict__ x, size_t n, size_t chunk,
                                 size_t chunks, float* __restrict__ scales,
                                 int8_t* __restrict__ q) {
  const size_t group = ThreadIndex() / kLanes;
  const size_t groups = ThreadCount() / kLanes;
  const unsigned lane = threadIdx.x % kLanes;
  // `c` is the same for all lanes of a warp (kLanes == 32: blockDim is a
  // multiple of 32), so the shuffles below see every lane.
  for (size_t c = group; c < chunks; c += groups) {
    const ChunkRange r = ChunkAt(c, chunk, n);
    float max_abs = 0.0f;
    for (size_t i = r.begin + lane; i < r.end; i += kLanes) {
      max_abs = fmaxf(max_abs, Magnitude(x[i]));
    }
    if constexpr (kLanes > 1) {
      for (unsigned offset = kLanes / 2; offset > 0; offset /= 2) {
        max_abs = fmaxf(max_abs, __shfl_xor_sync(kFullMask, max_abs, offset));
      }
    }
    const float scale = __fdiv_rn(max_abs, 127.0f);
    if (lane == 0) scales[c] = scale;
    if (!isfinite(scale) || scale == 0.0f) {
      for (size_t i = r.begin + lane; i < r.end; i += kLanes) q[i] = 0;
      continue;
    }
    const double inv = __ddiv_rn(1.0, static_cast<double>(scale));
    for (size_t i = r.begin + lane; i < r.end; i += kLanes) q[i] = QuantizeNearest(x[i], inv);
  }
}

// out = float(q) * scale per chunk; flags non-finite scales / values and the
// malformed payloads the CPU rejects (negative scale, q = -128).
template <unsigned kLanes>
__global__ void DecodeInt8Kernel(const float* __restrict__ scales, const int8_t* __restrict__ q,
                                 size_t n, size_t chunk, size_t chunks, float* __restrict__ out,
                                 int32_t* nonfinite) {
  const size_t group = ThreadIndex() / kLanes;
  const size_t groups = ThreadCount() / kLanes;
  const unsigned lane = threadIdx.x % kLanes;
  bool bad = false;
  for (size_t c = group; c < chunks; c += groups) {
    const ChunkRange r = ChunkAt(c, chunk, n);
    const float scale = scales[c];
    bad |= !isfinite(scale) || scale < 0.0f;
    for (size_t i = r.begin + lane; i < r.end; i += kLanes) {
      const int8_t v = q[i];
      const float y = __fmul_rn(static_cast<float>(v), scale);
      bad |= v == -128 || !isfinite(y);
      out[i] = y;
    }
  }
  if (bad) Flag(nonfinite);
}

// ---- sign ---------------------------------------------------------------------------------

// scale_c = float(sum_{i in c} double(Magnitude(x_i)) / count), the sum in index
// order. kLanes == 1: the thread reads its chunk (< 32 elements) directly.
// kLanes == 32: the warp stages kSumTile magnitudes (as doubles) in shared
// memory with coalesced loads and its lane 0 adds them in order.
template <unsigned kLanes>
__global__ void SignScalesKernel(const float* __restrict__ x, size_t n, size_t chunk,
                                 size_t chunks, float* __restrict__ scales) {
  __shared__ double tile[kLanes > 1 ? kThreads / kWarp : 1][kLanes > 1 ? kSumTile : 1];
  const size_t group = ThreadIndex() / kLanes;
  const size_t groups = ThreadCount() / kLanes;
  const unsigned lane = threadIdx.x % kLanes;
  for (size_t c = group; c < chunks; c += groups) {
    const ChunkRange r = ChunkAt(c, chunk, n);
    double sum = 0.0;
    if constexpr (kLanes == 1) {
      for (size_t i = r.begin; i < r.end; ++i) {
        sum = __dadd_rn(sum, static_cast<double>(Magnitude(x[i])));
      }
    } else {
      double* mine = tile[threadIdx.x / kWarp];
      for (size_t base = r.begin; base < r.end; base += kSumTile) {
        const size_t len = r.end - base < kSumTile ? r.end - base : kSumTile;
#pragma unroll
        for (unsigned k = 0; k < kSumTile / kWarp; ++k) {
          const size_t j = lane + k * kWarp;
          if (j < len) mine[j] = static_cast<double>(Magnitude(x[base + j]));
        }
        __syncwarp();
        if (lane == 0) {
          for (size_t j = 0; j < len; ++j) sum = __dadd_rn(sum, mine[j]);
        }
        __syncwarp();  // lane 0 has read the tile before it is overwritten
      }
    }
    if (lane == 0) {
      scales[c] = __double2float_rn(__ddiv_rn(sum, static_cast<double>(r.end - r.begin)));
    }
  }
}

// One warp ballot per 32 elements: bit i % 32 of word i / 32 is x_i's sign bit;
// little-endian words are the CPU's bytes (bit i % 8 of byte i / 8). The last,
// partial word is written byte by byte up to ceil(n / 8) bytes.
__global__ void SignBitsKernel(const float* __restrict__ x, size_t n,
                               uint32_t* __restrict__ words) {
  const size_t warp = ThreadIndex() / kWarp;
  const size_t warps = ThreadCount() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  for (size_t base = warp * kWarp; base < n; base += warps * kWarp) {  // warp-uniform
    const size_t i = base + lane;
    const bool negative = i < n && (__float_as_uint(x[i]) >> 31) != 0;
    const uint32_t word = __ballot_sync(kFullMask, negative);
    if (lane != 0) continue;
    const size_t w = base / kWarp;
    if (base + kWarp <= n) {
      words[w] = word;
    } else {
      auto* bytes = reinterpret_cast<uint8_t*>(words + w);
      const size_t count = (n - base + 7) / 8;
      for (size_t b = 0; b < count; ++b) bytes[b] = static_cast<uint8_t>(word >> (8 * b));
    }
  }
}

// out_i = +-scale_c: the wire bit replaces the float's sign bit. Flags
// non-finite or negative scales and set unused bits of the last byte.
template <unsigned kLanes>
__global__ void DecodeSignKernel(const float* __restrict__ scales, const uint8_t* __restrict__ bits,
                                 size_t n, size_t chunk, size_t chunks, float* __restrict__ out,
                                 int32_t* nonfinite) {
  const size_t group = ThreadIndex() / kLanes;
  const size_t groups = ThreadCount() / kLanes;
  const unsigned lane = threadIdx.x % kLanes;
  bool bad = false;
  if (ThreadIndex() == 0 && n % 8 != 0) bad |= (bits[n / 8] >> (n % 8)) != 0;
  for (size_t c = group; c < chunks; c += groups) {
    const ChunkRange r = ChunkAt(c, chunk, n);
    const float scale = scales[c];
    bad |= !isfinite(scale) || scale < 0.0f;
    const uint32_t magnitude = __float_as_uint(scale);
    for (size_t i = r.begin + lane; i < r.end; i += kLanes) {
      const uint32_t bit = (bits[i / 8] >> (i % 8)) & 1u;
      out[i] = __uint_as_float(magnitude | (bit << 31));
    }
  }
  if (bad) Flag(nonfinite);
}

// ---- top-k --------------------------------------------------------------------------------

// keys[i] = bits of Magnitude(x[i]), values[i] = i.
__global__ void TopKKeysKernel(const float* __restrict__ x, size_t n, uint32_t* __restrict__ keys,
                               uint32_t* __restrict__ values) {
  for (size_t i = ThreadIndex(); i < n; i += ThreadCount()) {
    keys[i] = MagnitudeKey(x[i]);
    values[i] = static_cast<uint32_t>(i);
  }
}

// Payload: u64 k (two u32 words, the payload being 4-byte aligned), k u32
// indices, k f32 values x[index]. indices == nullptr: every element (k == n).
__global__ void TopKGatherKernel(const float* __restrict__ x, const uint32_t* __restrict__ indices,
                                 size_t k, uint32_t* __restrict__ payload) {
  if (ThreadIndex() == 0) {
    payload[0] = static_cast<uint32_t>(k);
    payload[1] = static_cast<uint32_t>(static_cast<uint64_t>(k) >> 32);
  }
  uint32_t* out_indices = payload + 2;
  auto* out_values = reinterpret_cast<float*>(out_indices + k);
  for (size_t j = ThreadIndex(); j < k; j += ThreadCount()) {
    const uint32_t index = indices != nullptr ? indices[j] : static_cast<uint32_t>(j);
    out_indices[j] = index;
    out_values[j] = x[index];
  }
}

// out[index_j] = value_j (out zeroed before); indices out of range or not
// strictly ascending set *bad (out of range ones are skipped).
__global__ void DecodeTopKKernel(const uint32_t* __restrict__ indices,
                                 const float* __restrict__ values, size_t k, size_t n,
                                 float* __restrict__ out, int32_t* bad) {
  bool wrong = false;
  for (size_t j = ThreadIndex(); j < k; j += ThreadCount()) {
    const uint32_t index = indices[j];
    if (j > 0 && index <= indices[j - 1]) wrong = true;
    if (index >= n) {
      wrong = true;
      continue;
    }
    out[index] = values[j];
  }
  if (wrong) Flag(bad);
}

class TopKEncoderImpl final : public TopKEncoder {
 public:
  TopKEncoderImpl(size_t max_n, DeviceArray<uint32_t> keys0, DeviceArray<uint32_t> keys1,
                  DeviceArray<uint32_t> values0, DeviceArray<uint32_t> values1,
                  DeviceArray<std::byte> temp)
      : max_n_(max_n),
        keys0_(std::move(keys0)),
        keys1_(std::move(keys1)),
        values0_(std::move(values0)),
        values1_(std::move(values1)),
        temp_(std::move(temp)) {}

  Status Encode(Device& d, const float* x, size_t n, size_t k, std::byte* payload) override {
    if (n > max_n_) {
      return InvalidArgument("cuda codec top-k: " + std::to_string(n) +
                             " elements exceed the encoder's " + std::to_string(max_n_));
    }
    if (k > n) {
      return InvalidArgument("cuda codec top-k: k = " + std::to_string(k) + " exceeds n = " +
                             std::to_string(n));
    }
    CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "top-k"));
    Device::Impl& impl = d.impl();
    auto* words = reinterpret_cast<uint32_t*>(payload);
    if (k == 0 || k == n) {  // nothing to select (also n == 0)
      TopKGatherKernel<<<GridFor(impl, k, kThreads), kThreads, 0, impl.stream>>>(x, nullptr, k,
                                                                                words);
      return LaunchStatus("top-k gather");
    }
    const auto items = static_cast<uint32_t>(n);
    TopKKeysKernel<<<GridFor(impl, n, kThreads), kThreads, 0, impl.stream>>>(
        x, n, keys0_.data(), values0_.data());
    CHORUS_RETURN_IF_ERROR(LaunchStatus("top-k keys"));
    // Magnitude keys never have bit 31 set: sort bits [0, 31).
    cub::DoubleBuffer<uint32_t> keys(keys0_.data(), keys1_.data());
    cub::DoubleBuffer<uint32_t> values(values0_.data(), values1_.data());
    size_t needed = 0;
    CHORUS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairsDescending(
                                    nullptr, needed, keys, values, items, 0, 31, impl.stream),
                                "top-k sort size");
    CHORUS_RETURN_IF_ERROR(CheckTemp(needed));
    size_t available = temp_.bytes();
    CHORUS_CUDA_RETURN_IF_ERROR(
        cub::DeviceRadixSort::SortPairsDescending(temp_.data(), available, keys, values, items, 0,
                                                  31, impl.stream),
        "top-k sort by magnitude");
    // values.Current()[0, k) are the selected indices, by magnitude; sort them
    // ascending on the bits an index < n can have.
    // (here 1 <= k < n, so n >= 2 and n - 1 has at least one bit).
    const int index_bits = static_cast<int>(std::bit_width(static_cast<uint32_t>(n - 1)));
    cub::DoubleBuffer<uint32_t> selected(values.Current(), values.Alternate());
    const auto selected_items = static_cast<uint32_t>(k);
    needed = 0;
    CHORUS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortKeys(nullptr, needed, selected,
                                                               selected_items, 0, index_bits,
                                                               impl.stream),
                                "top-k index sort size");
    CHORUS_RETURN_IF_ERROR(CheckTemp(needed));
    available = temp_.bytes();
    CHORUS_CUDA_RETURN_IF_ERROR(
        cub::DeviceRadixSort::SortKeys(temp_.data(), available, selected, selected_items, 0,
                                       index_bits, impl.stream),
        "top-k sort indices");
    TopKGatherKernel<<<GridFor(impl, k, kThreads), kThreads, 0, impl.stream>>>(
        x, selected.Current(), k, words);
    return LaunchStatus("top-k gather");
  }

 private:
  Status CheckTemp(size_t needed) const {
    if (needed <= temp_.bytes()) return Status::Ok();
    return Internal("cuda codec top-k: radix sort needs " + std::to_string(needed) +
                    " bytes of workspace, " + std::to_string(temp_.bytes()) +
                    " were allocated for max_n = " + std::to_string(max_n_));
  }

  size_t max_n_;
  DeviceArray<uint32_t> keys0_, keys1_, values0_, values1_;
  DeviceArray<std::byte> temp_;
};

}  // namespace

// ---- Sizes ----------------------------------------------------------------------------------

size_t Fp16PayloadBytes(size_t n) { return 2 * n; }
size_t Int8PayloadBytes(size_t n, int chunk) { return 4 * NumChunks(n, chunk) + n; }
size_t SignPayloadBytes(size_t n, int chunk) { return 4 * NumChunks(n, chunk) + (n + 7) / 8; }
size_t TopKPayloadBytes(size_t k) { return 8 + 8 * k; }

// ---- Encoders -------------------------------------------------------------------------------

Status EncodeFp16(Device& d, const float* x, size_t n, std::byte* payload) {
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 2, "fp16"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const bool vectorized =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(payload) % 8 == 0;
  EncodeFp16Kernel<<<GridFor(impl, vectorized ? (n + 3) / 4 : n, kThreads), kThreads, 0,
                     impl.stream>>>(x, n, reinterpret_cast<uint16_t*>(payload), vectorized);
  return LaunchStatus("fp16 encode");
}

Status EncodeInt8(Device& d, const float* x, size_t n, int chunk, std::byte* payload) {
  CHORUS_RETURN_IF_ERROR(CheckChunk(chunk, "int8"));
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "int8"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const size_t chunks = NumChunks(n, chunk);
  auto* scales = reinterpret_cast<float*>(payload);
  auto* q = reinterpret_cast<int8_t*>(payload + 4 * chunks);
  const auto c = static_cast<size_t>(chunk);
  LaunchPerChunk(impl, chunks, chunk, [&](auto lanes, unsigned grid) {
    EncodeInt8Kernel<decltype(lanes)::value><<<grid, kThreads, 0, impl.stream>>>(x, n, c, chunks, scales, q);
  });
  return LaunchStatus("int8 encode");
}

Status EncodeSign(Device& d, const float* x, size_t n, int chunk, std::byte* payload) {
  CHORUS_RETURN_IF_ERROR(CheckChunk(chunk, "sign"));
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "sign"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const size_t chunks = NumChunks(n, chunk);
  auto* scales = reinterpret_cast<float*>(payload);
  auto* words = reinterpret_cast<uint32_t*>(payload + 4 * chunks);
  const auto c = static_cast<size_t>(chunk);
  LaunchPerChunk(impl, chunks, chunk, [&](auto lanes, unsigned grid) {
    SignScalesKernel<decltype(lanes)::value><<<grid, kThreads, 0, impl.stream>>>(x, n, c, chunks, scales);
  });
  CHORUS_RETURN_IF_ERROR(LaunchStatus("sign encode scales"));
  SignBitsKernel<<<GridFor(impl, n, kThreads), kThreads, 0, impl.stream>>>(x, n, words);
  return LaunchStatus("sign encode bits");
}

// ---- Decoders -------------------------------------------------------------------------------

Status DecodeFp16(Device& d, const std::byte* payload, size_t n, float* out, int32_t* nonfinite) {
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 2, "fp16"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  DecodeFp16Kernel<<<GridFor(impl, n, kThreads), kThreads, 0, impl.stream>>>(
      reinterpret_cast<const uint16_t*>(payload), n, out, nonfinite);
  return LaunchStatus("fp16 decode");
}

Status DecodeInt8(Device& d, const std::byte* payload, size_t n, int chunk, float* out,
                  int32_t* nonfinite) {
  CHORUS_RETURN_IF_ERROR(CheckChunk(chunk, "int8"));
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "int8"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const size_t chunks = NumChunks(n, chunk);
  const auto* scales = reinterpret_cast<const float*>(payload);
  const auto* q = reinterpret_cast<const int8_t*>(payload + 4 * chunks);
  const auto c = static_cast<size_t>(chunk);
  LaunchPerChunk(impl, chunks, chunk, [&](auto lanes, unsigned grid) {
    DecodeInt8Kernel<decltype(lanes)::value><<<grid, kThreads, 0, impl.stream>>>(scales, q, n, c, chunks, out,
                                                                   nonfinite);
  });
  return LaunchStatus("int8 decode");
}

Status DecodeSign(Device& d, const std::byte* payload, size_t n, int chunk, float* out,
                  int32_t* nonfinite) {
  CHORUS_RETURN_IF_ERROR(CheckChunk(chunk, "sign"));
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "sign"));
  if (n == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const size_t chunks = NumChunks(n, chunk);
  const auto* scales = reinterpret_cast<const float*>(payload);
  const auto* bits = reinterpret_cast<const uint8_t*>(payload + 4 * chunks);
  const auto c = static_cast<size_t>(chunk);
  LaunchPerChunk(impl, chunks, chunk, [&](auto lanes, unsigned grid) {
    DecodeSignKernel<decltype(lanes)::value><<<grid, kThreads, 0, impl.stream>>>(scales, bits, n, c, chunks, out,
                                                                   nonfinite);
  });
  return LaunchStatus("sign decode");
}

// ---- Top-k ----------------------------------------------------------------------------------

Result<std::unique_ptr<TopKEncoder>> TopKEncoder::Create(Device& d, size_t max_n) {
  if (static_cast<uint64_t>(max_n) >= kMaxSparseElements) {
    return Err(InvalidArgument("cuda codec top-k: " + std::to_string(max_n) +
                               " elements exceed the u32 index range"));
  }
  // The largest workspace either sort can ask for: all max_n items on all key
  // bits (Encode re-checks the exact size before each sort).
  size_t temp_bytes = 0;
  if (max_n > 0) {
    cub::DoubleBuffer<uint32_t> keys(nullptr, nullptr);
    cub::DoubleBuffer<uint32_t> values(nullptr, nullptr);
    const auto items = static_cast<uint32_t>(max_n);
    size_t pairs = 0;
    CHORUS_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairsDescending(
                                    nullptr, pairs, keys, values, items, 0, 32, d.impl().stream),
                                "top-k sort size");
    size_t indices = 0;
    CHORUS_CUDA_RETURN_IF_ERROR(
        cub::DeviceRadixSort::SortKeys(nullptr, indices, keys, items, 0, 32, d.impl().stream),
        "top-k index sort size");
    temp_bytes = pairs > indices ? pairs : indices;
  }
  CHORUS_ASSIGN_OR_RETURN(auto keys0, DeviceArray<uint32_t>::Create(d, max_n));
  CHORUS_ASSIGN_OR_RETURN(auto keys1, DeviceArray<uint32_t>::Create(d, max_n));
  CHORUS_ASSIGN_OR_RETURN(auto values0, DeviceArray<uint32_t>::Create(d, max_n));
  CHORUS_ASSIGN_OR_RETURN(auto values1, DeviceArray<uint32_t>::Create(d, max_n));
  CHORUS_ASSIGN_OR_RETURN(auto temp, DeviceArray<std::byte>::Create(d, temp_bytes));
  return std::unique_ptr<TopKEncoder>(new TopKEncoderImpl(max_n, std::move(keys0), std::move(keys1),
                                                          std::move(values0), std::move(values1),
                                                          std::move(temp)));
}

Status DecodeTopK(Device& d, const std::byte* payload, size_t n, size_t k, float* out,
                  int32_t* bad) {
  CHORUS_RETURN_IF_ERROR(CheckAligned(payload, 4, "top-k"));
  if (k > n) {
    return InvalidArgument("cuda codec top-k: k = " + std::to_string(k) + " exceeds n = " +
                           std::to_string(n));
  }
  CHORUS_RETURN_IF_ERROR(d.Zero(out, n * sizeof(float)));
  if (k == 0) return Status::Ok();
  Device::Impl& impl = d.impl();
  const auto* indices = reinterpret_cast<const uint32_t*>(payload + 8);
  const auto* values = reinterpret_cast<const float*>(payload + 8 + 4 * k);
  DecodeTopKKernel<<<GridFor(impl, k, kThreads), kThreads, 0, impl.stream>>>(indices, values, k, n,
                                                                            out, bad);
  return LaunchStatus("top-k decode");
}

}  // namespace chorus::kernels::cuda
