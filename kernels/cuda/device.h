// A CUDA device as Chorus uses it: one GPU, one stream, the cuBLAS(Lt) and cuDNN
// handles bound to that stream, and typed device / pinned host arrays.
//
// This header is plain C++ (no CUDA headers): trainer/ and tests include it.
// Everything is enqueued on the device's one stream, in order; calls return as
// soon as the work is enqueued, and errors of the asynchronous work surface at
// the next Synchronize() (CUDA's sticky-error model). Kernels and the library
// handles live in kernels/cuda/*.cu|*.cc, which alone include CUDA headers
// (internal.h).
//
// Built only when CMake found CUDA (CHORUS_HAVE_CUDA). Without it, callers
// reach the backend through kernels/cuda/availability.h, which says so.
// Not thread-safe: one thread drives one Device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"

namespace chorus::kernels::cuda {

// IEEE binary16 as its bits; device code reinterprets these as __half.
using Half = uint16_t;

class Device {
 public:
  // Opens GPU `ordinal`: makes it current, creates a non-blocking stream and the
  // cuBLAS, cuBLASLt and cuDNN handles (with workspaces, so that work can be
  // captured into CUDA graphs). Errors name the ordinal and the number of GPUs
  // present, or the driver's message (kUnavailable / kInvalidArgument).
  [[nodiscard]] static Result<std::unique_ptr<Device>> Open(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const;
  // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, CUDA runtime 13.0, cuDNN 9.19.0)"
  const std::string& description() const;
  // Compute capability major * 10 + minor (90 for H100 / H200).
  int compute_capability() const;

  // Raw allocations (prefer DeviceArray / PinnedArray below).
  [[nodiscard]] Result<void*> Allocate(size_t bytes);
  void Free(void* device_pointer);
  [[nodiscard]] Result<void*> AllocatePinned(size_t bytes);
  void FreePinned(void* host_pointer);

  // Asynchronous copies on the stream. Host memory that is not pinned is copied
  // synchronously by CUDA; pass pinned memory (PinnedArray) for overlap.
  [[nodiscard]] Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes);
  [[nodiscard]] Status CopyToHost(void* host_dst, const void* device_src, size_t bytes);
  [[nodiscard]] Status CopyOnDevice(void* device_dst, const void* device_src, size_t bytes);
  [[nodiscard]] Status Zero(void* device_dst, size_t bytes);

  // Waits for everything enqueued so far. The first error of the asynchronous
  // work is returned here, naming the device and `what` (for the log).
  [[nodiscard]] Status Synchronize(const char* what = "stream");

  // CUDA graphs of the work enqueued between BeginCapture and EndCapture. A graph
  // replays the same kernels on the same pointers: values that change from step
  // to step must be read by the kernels from device memory (or copied there by a
  // copy node from pinned host memory inside the graph).
  class Graph {
   public:
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    // Enqueues one replay on the device's stream.
    [[nodiscard]] Status Launch();
    size_t node_count() const { return nodes_; }

   private:
    friend class Device;
    Graph(Device* device, void* exec, size_t nodes) : device_(device), exec_(exec), nodes_(nodes) {}
    Device* device_;
    void* exec_;  // cudaGraphExec_t
    size_t nodes_;
  };
  [[nodiscard]] Status BeginCapture();
  // Ends the capture and instantiates it. On error (an op that cannot be
  // captured) the capture is abandoned and the stream is usable again.
  [[nodiscard]] Result<std::unique_ptr<Graph>> EndCapture();

  struct Impl;  // CUDA-side state (internal.h)
  Impl& impl() { return *impl_; }

 private:
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A typed allocation, freed on destruction: device memory (DeviceArray) or
// pinned, page-locked host memory (PinnedArray: the staging buffers between
// the device and the transport or the data loader). Default-constructed: empty.
template <typename T, bool kPinned>
class CudaArray {
 public:
  CudaArray() = default;
  [[nodiscard]] static Result<CudaArray> Create(Device& device, size_t count) {
    CudaArray array;
    array.device_ = &device;
    array.count_ = count;
    if (count == 0) return array;
    CHORUS_ASSIGN_OR_RETURN(void* p, kPinned ? device.AllocatePinned(count * sizeof(T))
                                             : device.Allocate(count * sizeof(T)));
    array.data_ = static_cast<T*>(p);
    return array;
  }
  ~CudaArray() { Reset(); }
  CudaArray(CudaArray&& o) noexcept { *this = std::move(o); }
  CudaArray& operator=(CudaArray&& o) noexcept {
    if (this != &o) {
      Reset();
      device_ = std::exchange(o.device_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  // Host memory only.
  T& operator[](size_t i) requires kPinned { return data_[i]; }
  const T& operator[](size_t i) const requires kPinned { return data_[i]; }

 private:
  void Reset() {
    if (data_ != nullptr) {
      if constexpr (kPinned) {
        device_->FreePinned(data_);
      } else {
        device_->Free(data_);
      }
    }
    data_ = nullptr;
    count_ = 0;
  }
  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
using DeviceArray = CudaArray<T, false>;
template <typename T>
using PinnedArray = CudaArray<T, true>;

}  // namespace chorus::kernels::cuda
