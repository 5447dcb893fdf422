// Small own kernels behind the cuBLAS / cuBLASLt GEMMs of blas.cc: the bias
// gradient (column sums of dy), a row broadcast of the bias (the fallback of
// LinearForward when cuBLASLt offers no bias epilogue) and C = beta * C (a GEMM
// with an empty inner dimension, which BLAS does not take).
//
// Launchers are declared again in blas.cc (namespace linear_kernels); nothing
// else calls them. They enqueue on the device's stream and return the launch
// status. Nothing here allocates.
#include "kernels/cuda/internal.h"

namespace chorus::kernels::cuda {
namespace {

// Column sums: a block covers kColumnTile adjacent columns (threadIdx.x, so a
// warp reads 32 consecutive halves of one row) and kRowLanes rows at a time
// (threadIdx.y strides over the rows). Each thread sums its rows in FP32; the
// kRowLanes partial sums of a column are then added in a fixed order, so the
// result does not depend on scheduling (deterministic).
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 16;

__global__ void ColumnSumsKernel(int rows, int cols, const __half* __restrict__ x,
                                 __half* __restrict__ sums) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];  // +1: no bank conflicts
  const int col = blockIdx.x * kColumnTile + threadIdx.x;
  float acc = 0.0f;
  if (col < cols) {
    for (int r = threadIdx.y; r < rows; r += kRowLanes) {
      acc += __half2float(x[static_cast<size_t>(r) * cols + col]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int i = 0; i < kRowLanes; ++i) total += partial[i][threadIdx.x];
    sums[col] = __float2half_rn(total);
  }
}

// y [rows, cols] = row broadcast down the rows (zeros when row == nullptr).
__global__ void BroadcastRowsKernel(size_t rows, size_t cols, const __half* __restrict__ row,
                                    __half* __restrict__ y) {
  const size_t count = rows * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = row != nullptr ? row[i % cols] : __float2half_rn(0.0f);
  }
}

__device__ inline float Load(const __half* p) { return __half2float(*p); }
__device__ inline float Load(const float* p) { return *p; }
__device__ inline void Store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void Store(float* p, float v) { *p = v; }

// c [m, n] (row stride ldc) = beta * c; beta == 0 writes zeros without reading
// c (as BLAS: NaN in an uninitialised C must not survive).
template <typename T>
__global__ void ScaleMatrixKernel(int m, int n, float beta, T* __restrict__ c, int ldc) {
  const size_t count = static_cast<size_t>(m) * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    T* p = c + (i / n) * static_cast<size_t>(ldc) + i % n;
    Store(p, beta == 0.0f ? 0.0f : beta * Load(p));
  }
}

constexpr unsigned kThreads = 256;

template <typename T>
Status ScaleMatrixImpl(Device::Impl& impl, int m, int n, float beta, T* c, int ldc) {
  if (m <= 0 || n <= 0) return Status::Ok();
  const size_t count = static_cast<size_t>(m) * n;
  ScaleMatrixKernel<T><<<GridFor(impl, count, kThreads), kThreads, 0, impl.stream>>>(m, n, beta,
                                                                                      c, ldc);
  return LaunchStatus("ScaleMatrixKernel");
}

}  // namespace

namespace linear_kernels {

// sums [cols] = column sums of x [rows, cols] (FP32 accumulation, FP16 out).
// rows == 0 writes zeros.
Status ColumnSums(Device::Impl& impl, int rows, int cols, const Half* x, Half* sums) {
  if (cols <= 0) return Status::Ok();
  const dim3 block(kColumnTile, kRowLanes);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile));
  ColumnSumsKernel<<<grid, block, 0, impl.stream>>>(rows < 0 ? 0 : rows, cols, AsHalf(x),
                                                    AsHalf(sums));
  return LaunchStatus("ColumnSumsKernel");
}

// y [rows, cols] = row (FP16 [cols]) on every row; zeros when row == nullptr.
Status BroadcastRows(Device::Impl& impl, int rows, int cols, const Half* row, Half* y) {
  if (rows <= 0 || cols <= 0) return Status::Ok();
  const size_t count = static_cast<size_t>(rows) * cols;
  BroadcastRowsKernel<<<GridFor(impl, count, kThreads), kThreads, 0, impl.stream>>>(
      static_cast<size_t>(rows), static_cast<size_t>(cols), AsHalf(row), AsHalf(y));
  return LaunchStatus("BroadcastRowsKernel");
}

// c [m, n] (row stride ldc) = beta * c, in FP32, rounded once for FP16 c.
Status ScaleMatrix(Device::Impl& impl, int m, int n, float beta, Half* c, int ldc) {
  return ScaleMatrixImpl(impl, m, n, beta, AsHalf(c), ldc);
}
Status ScaleMatrix(Device::Impl& impl, int m, int n, float beta, float* c, int ldc) {
  return ScaleMatrixImpl(impl, m, n, beta, c, ldc);
}

}  // namespace linear_kernels
}  // namespace chorus::kernels::cuda
