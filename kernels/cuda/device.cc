// Device: stream, library handles, memory, copies, graphs (see device.h).
#include <cstdio>
#include <string>

#include "kernels/cuda/availability.h"
#include "kernels/cuda/internal.h"

namespace chorus::kernels::cuda {
namespace {

// 32 MiB: what cuBLAS recommends on Hopper for graph-captured work.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;

std::string Version(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

}  // namespace

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  const StatusCode code = err == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted
                          : err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                              ? StatusCode::kUnavailable
                              : StatusCode::kInternal;
  return Status(code, std::string("CUDA: ") + what + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

Status CublasStatus(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  // Only a loaded cuBLAS returns codes, so its names are at hand.
  const CublasApi& blas = **Cublas();
  return Internal(std::string("cuBLAS: ") + what + ": " + blas.cublasGetStatusName(err) + " (" +
                  blas.cublasGetStatusString(err) + ")");
}

Status CudnnStatus(cudnnStatus_t err, const char* what) {
  if (err == CUDNN_STATUS_SUCCESS) return Status::Ok();
  char detail[256] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return Internal(std::string("cuDNN: ") + what + ": " + cudnnGetErrorString(err) +
                  (detail[0] != 0 ? std::string(" (") + detail + ")" : std::string()));
}

Status LaunchStatus(const char* what) { return CudaStatus(cudaGetLastError(), what); }

bool Compiled() { return true; }

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) {
      *why = std::string("the CUDA runtime finds no usable GPU: ") + cudaGetErrorName(err) +
             " (" + cudaGetErrorString(err) + ")";
    }
    cudaGetLastError();  // clear it: not a sticky error
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the CUDA driver reports no GPU";
  return count;
}

Result<std::unique_ptr<Device>> Device::Open(int ordinal) {
  std::string why;
  const int count = DeviceCount(&why);
  if (count == 0) {
    return Err(Unavailable("cuda:" + std::to_string(ordinal) + " asked for, but " + why));
  }
  if (ordinal < 0 || ordinal >= count) {
    return Err(InvalidArgument("cuda:" + std::to_string(ordinal) + " asked for, but this machine has " +
                               std::to_string(count) + " GPU(s): cuda:0..cuda:" +
                               std::to_string(count - 1)));
  }
  auto impl = std::make_unique<Impl>();
  impl->ordinal = ordinal;
  CHORUS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaDeviceProp prop{};
  CHORUS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  impl->compute_capability = prop.major * 10 + prop.minor;
  impl->sm_count = prop.multiProcessorCount;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB",
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  const size_t cudnn_version = cudnnGetVersion();
  impl->description = "cuda:" + std::to_string(ordinal) + " " + prop.name + " (sm_" +
                      std::to_string(impl->compute_capability) + ", " + memory +
                      ", CUDA runtime " + Version(runtime, 1000, 10) + ", cuDNN " +
                      std::to_string(cudnn_version / 10000) + "." +
                      std::to_string((cudnn_version % 10000) / 100) + "." +
                      std::to_string(cudnn_version % 100) + ")";
  // Take ownership of each handle as soon as it exists so that an error below
  // releases what was made (the destructor checks every field).
  std::unique_ptr<Device> device(new Device(std::move(impl)));
  Impl& d = device->impl();
  CHORUS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking),
                              "cudaStreamCreate");
  CHORUS_ASSIGN_OR_RETURN(d.blas, Cublas());
  const CublasApi& blas = *d.blas;
  CHORUS_CUBLAS_RETURN_IF_ERROR(blas.cublasCreate(&d.cublas), "cublasCreate");
  CHORUS_CUBLAS_RETURN_IF_ERROR(blas.cublasSetStream(d.cublas, d.stream), "cublasSetStream");
  CHORUS_CUBLAS_RETURN_IF_ERROR(blas.cublasLtCreate(&d.cublas_lt), "cublasLtCreate");
  CHORUS_CUDA_RETURN_IF_ERROR(cudaMalloc(&d.blas_workspace, kBlasWorkspaceBytes),
                              "cudaMalloc(cuBLAS workspace)");
  d.blas_workspace_bytes = kBlasWorkspaceBytes;
  CHORUS_CUBLAS_RETURN_IF_ERROR(
      blas.cublasSetWorkspace(d.cublas, d.blas_workspace, d.blas_workspace_bytes),
      "cublasSetWorkspace");
  CHORUS_CUBLAS_RETURN_IF_ERROR(blas.cublasSetMathMode(
          d.cublas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                                "cublasSetMathMode");
  CHORUS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&d.cudnn), "cudnnCreate");
  CHORUS_CUDNN_RETURN_IF_ERROR(cudnnSetStream(d.cudnn, d.stream), "cudnnSetStream");
  return device;
}

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Device::~Device() {
  if (!impl_) return;
  cudaSetDevice(impl_->ordinal);
  if (impl_->stream != nullptr) cudaStreamSynchronize(impl_->stream);
  if (impl_->cudnn != nullptr) cudnnDestroy(impl_->cudnn);
  if (impl_->cublas_lt != nullptr) impl_->blas->cublasLtDestroy(impl_->cublas_lt);
  if (impl_->cublas != nullptr) impl_->blas->cublasDestroy(impl_->cublas);
  if (impl_->blas_workspace != nullptr) cudaFree(impl_->blas_workspace);
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

int Device::ordinal() const { return impl_->ordinal; }
const std::string& Device::description() const { return impl_->description; }
int Device::compute_capability() const { return impl_->compute_capability; }

Result<void*> Device::Allocate(size_t bytes) {
  void* p = nullptr;
  const Status s = CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc");
  if (!s.ok()) {
    return Err(s.WithContext(impl_->description + ": allocating " + std::to_string(bytes) +
                             " bytes"));
  }
  return p;
}

void Device::Free(void* p) {
  if (p != nullptr) cudaFree(p);
}

Result<void*> Device::AllocatePinned(size_t bytes) {
  void* p = nullptr;
  const Status s = CudaStatus(cudaMallocHost(&p, bytes), "cudaMallocHost");
  if (!s.ok()) return Err(s.WithContext("pinning " + std::to_string(bytes) + " host bytes"));
  return p;
}

void Device::FreePinned(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}

Status Device::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_->stream),
                    "copy to device");
}

Status Device::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream),
                    "copy to host");
}

Status Device::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream),
                    "copy on device");
}

Status Device::Zero(void* dst, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemsetAsync(dst, 0, bytes, impl_->stream), "memset");
}

Status Device::Synchronize(const char* what) {
  const Status s = CudaStatus(cudaStreamSynchronize(impl_->stream), what);
  if (!s.ok()) return s.WithContext(impl_->description);
  return s;
}

Status Device::BeginCapture() {
  CHORUS_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
  impl_->capturing = true;
  return Status::Ok();
}

Result<std::unique_ptr<Device::Graph>> Device::EndCapture() {
  impl_->capturing = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(impl_->stream, &graph);
  if (end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; keep the stream usable
    return Err(CudaStatus(end, "cudaStreamEndCapture"));
  }
  size_t nodes = 0;
  cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    return Err(CudaStatus(inst, "cudaGraphInstantiate"));
  }
  return std::unique_ptr<Graph>(new Graph(this, exec, nodes));
}

Device::Graph::~Graph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

Status Device::Graph::Launch() {
  return CudaStatus(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), device_->impl().stream),
      "cudaGraphLaunch");
}

}  // namespace chorus::kernels::cuda
