// Bandwidth of the memory-bound CUDA kernels (kernels/cuda/ops.h) against a
// device-to-device copy on the same GPU: FloatToHalf, UnscaleGradients, the
// fused LARS step, and the gossip encoders (fp16, int8, sign, top-k). For
// vectors of 1M, 16M and 64M floats it prints the median time per call and
// the achieved bandwidth, GB/s = (bytes the op must read + write at the least,
// counted below per op) / time, and that bandwidth as a fraction of the copy's.
// Times are host wall clock around Device::Synchronize over a batch of calls
// (enough calls that launch and synchronisation overheads are small), median of
// the repetitions. A benchmark, not a test: asserts nothing. Without a GPU it
// says so and exits 0.
//
// Usage: chorus_bench_kernels_gpu [repetitions=20] [chunk=256]
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/availability.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace {

using chorus::Status;
using chorus::kernels::cuda::Device;
using chorus::kernels::cuda::DeviceArray;
using chorus::kernels::cuda::Half;

// Exits with the error: a benchmark has no use for a partial table.
void Check(const Status& s, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "chorus_bench_kernels_gpu: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Take(chorus::Result<T> r, const std::string& what) {
  if (!r.has_value()) Check(r.error(), what);
  return std::move(*r);
}

// Median seconds per call of fn over `repetitions` batches of `batch` calls.
double MedianSeconds(Device& device, int repetitions, int batch,
                     const std::function<Status()>& fn) {
  Check(fn(), "warm-up");
  Check(device.Synchronize("warm-up"), "warm-up");
  std::vector<double> seconds;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < batch; ++b) Check(fn(), "call");
    Check(device.Synchronize("bench"), "synchronize");
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / batch);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct Row {
  std::string op;
  double bytes;  // bytes read + written at the least, per call
  double seconds;
};

void Print(size_t n, const std::vector<Row>& rows) {
  const double copy_gbps = rows.front().bytes / rows.front().seconds * 1e-9;
  for (const Row& row : rows) {
    const double gbps = row.bytes / row.seconds * 1e-9;
    std::printf("%5zuM  %-30s %10.3f ms %9.1f GB/s %7.2f x copy\n", n >> 20, row.op.c_str(),
                row.seconds * 1e3, gbps, gbps / copy_gbps);
  }
  std::printf("\n");
}

// One buffer size: random input, the device buffers every op shares, and
// the table's rows, one per op.
class SizeBench {
 public:
  SizeBench(Device& device, size_t n, int repetitions, int chunk)
      : device_(device), n_(n), fn_(static_cast<double>(n)), repetitions_(repetitions), chunk_(chunk),
        // Enough calls per batch that ~1 ms of work hides the launch overhead.
        batch_(static_cast<int>(std::max<size_t>(1, std::min<size_t>(64, (size_t{32} << 20) / n)))),
        x_(Take(DeviceArray<float>::Create(device, n), "x")),
        y_(Take(DeviceArray<float>::Create(device, n), "y")),
        half_(Take(DeviceArray<Half>::Create(device, n), "half")),
        scalars_(Take(DeviceArray<float>::Create(device, 2), "scalars")),  // inv_scale, lr
        flag_(Take(DeviceArray<int32_t>::Create(device, 1), "flag")) {}

  void Run() {
    Setup();
    Conversions();
    Optimizer();
    Encoders();
    TopK();
    Print(n_, rows_);
  }

 private:
  void Setup() {
    std::vector<float> host(n_);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : host) v = dist(rng);
    Check(device_.CopyToDevice(x_.data(), host.data(), n_ * sizeof(float)), "upload");
    const float host_scalars[2] = {1.0f / 1024.0f, 0.1f};
    Check(device_.CopyToDevice(scalars_.data(), host_scalars, sizeof(host_scalars)), "upload");
    Check(device_.Zero(flag_.data(), sizeof(int32_t)), "zero");
    Check(chorus::kernels::cuda::FloatToHalf(device_, x_.data(), half_.data(), n_), "FloatToHalf");
    Check(device_.Synchronize("setup"), "setup");
  }

  void Time(const std::string& op, double bytes, const std::function<Status()>& call) {
    rows_.push_back({op, bytes, MedianSeconds(device_, repetitions_, batch_, call)});
  }

  void Conversions() {
    namespace cuda = chorus::kernels::cuda;
    Time("copy (reference)", 8 * fn_, [&] { return device_.CopyOnDevice(y_.data(), x_.data(), n_ * sizeof(float)); });
    Time("FloatToHalf", 6 * fn_, [&] { return cuda::FloatToHalf(device_, x_.data(), half_.data(), n_); });
    Time("UnscaleGradients", 6 * fn_, [&] {
      return cuda::UnscaleGradients(device_, n_, half_.data(), scalars_.data(), y_.data(), flag_.data());
    });
  }

  // LARS over 20 tensors of uneven sizes (alternately weights and biases).
  // Bytes: norms read w, g (8n); the update reads w, g, v (12n) and writes
  // w, v (8n) and the FP16 working copy (2n).
  void Optimizer() {
    namespace cuda = chorus::kernels::cuda;
    constexpr int kTensors = 20;
    std::vector<cuda::TensorRange> tensors;
    size_t offset = 0;
    for (int t = 0; t < kTensors; ++t) {
      const size_t count = t + 1 == kTensors ? n_ - offset : n_ / (2 * kTensors) + (n_ / kTensors) * (t % 3) / 2;
      tensors.push_back({offset, count, t % 2 == 0});
      offset += count;
    }
    auto master = Take(DeviceArray<float>::Create(device_, n_), "master");
    auto momentum = Take(DeviceArray<float>::Create(device_, n_), "momentum");
    Check(device_.CopyOnDevice(master.data(), x_.data(), n_ * sizeof(float)), "copy");
    Check(device_.Zero(momentum.data(), n_ * sizeof(float)), "zero");
    cuda::FusedOptimizerOptions options;
    options.lars = true;
    auto optimizer = Take(cuda::FusedOptimizer::Create(device_, tensors, options), "optimizer");
    Time("FusedOptimizer::Step (LARS, 20)", 30 * fn_, [&] {
      return optimizer->Step(device_, scalars_.data() + 1, master.data(), y_.data(), momentum.data(), half_.data(),
                             nullptr);
    });
  }

  // Encoders: read x (4n), write the payload.
  void Encoders() {
    namespace cuda = chorus::kernels::cuda;
    const size_t chunks = (n_ + chunk_ - 1) / chunk_;
    auto payload = Take(
        DeviceArray<std::byte>::Create(device_, std::max(cuda::Int8PayloadBytes(n_, chunk_), 2 * n_) + 64), "payload");
    std::byte* p = payload.data() + 16;  // after the codec header, as a node lays it out
    const std::string c = std::to_string(chunk_);
    Time("EncodeFp16", 6 * fn_, [&] { return cuda::EncodeFp16(device_, x_.data(), n_, p); });
    Time("EncodeInt8 (chunk " + c + ")", 5 * fn_ + 4.0 * chunks,
         [&] { return cuda::EncodeInt8(device_, x_.data(), n_, chunk_, p); });
    Time("EncodeSign (chunk " + c + ")", 4 * fn_ + fn_ / 8 + 4.0 * chunks,
         [&] { return cuda::EncodeSign(device_, x_.data(), n_, chunk_, p); });
  }

  // Top-k, ratio 0.01: at the least read x (4n) and write 8k.
  void TopK() {
    namespace cuda = chorus::kernels::cuda;
    const size_t k = std::max<size_t>(1, (n_ + 99) / 100);
    auto encoder = Take(cuda::TopKEncoder::Create(device_, n_), "top-k encoder");
    auto payload = Take(DeviceArray<std::byte>::Create(device_, cuda::TopKPayloadBytes(k) + 16), "payload");
    Time("TopK encode (ratio 0.01)", 4 * fn_ + 8.0 * k,
         [&] { return encoder->Encode(device_, x_.data(), n_, k, payload.data() + 16); });
  }

  Device& device_;
  const size_t n_;
  const double fn_;
  const int repetitions_;
  const int chunk_;
  const int batch_;
  DeviceArray<float> x_, y_;
  DeviceArray<Half> half_;
  DeviceArray<float> scalars_;
  DeviceArray<int32_t> flag_;
  std::vector<Row> rows_;
};

void BenchSize(Device& device, size_t n, int repetitions, int chunk) { SizeBench(device, n, repetitions, chunk).Run(); }

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const int chunk = argc > 2 ? std::atoi(argv[2]) : 256;
  if (chunk < 1 || chunk > 65536) {
    std::fprintf(stderr, "chorus_bench_kernels_gpu: chunk must be in [1, 65536]\n");
    return 2;
  }
  std::string why;
  if (chorus::kernels::cuda::DeviceCount(&why) == 0) {
    std::printf("no GPU: %s\n", why.c_str());
    return 0;
  }
  auto device = Take(Device::Open(0), "opening cuda:0");
  std::printf("%s\n", device->description().c_str());
  std::printf(
      "GB/s = least bytes read + written per call / median time per call (%d repetitions)\n\n",
      repetitions);
  for (size_t n : {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20}) {
    BenchSize(*device, n, repetitions, chunk);
  }
  return 0;
}
