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

void BenchSize(Device& device, size_t n, int repetitions, int chunk) {
  namespace cuda = chorus::kernels::cuda;
  // Enough calls per batch that ~1 ms of work hides the launch overhead.
  const int batch =
      static_cast<int>(std::max<size_t>(1, std::min<size_t>(64, (size_t{32} << 20) / n)));
  const double fn = static_cast<double>(n);

  std::vector<float> host(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : host) v = dist(rng);

  auto x = Take(DeviceArray<float>::Create(device, n), "x");
  auto y = Take(DeviceArray<float>::Create(device, n), "y");
  auto half = Take(DeviceArray<Half>::Create(device, n), "half");
  auto scalars = Take(DeviceArray<float>::Create(device, 2), "scalars");  // inv_scale, lr
  auto flag = Take(DeviceArray<int32_t>::Create(device, 1), "flag");
  Check(device.CopyToDevice(x.data(), host.data(), n * sizeof(float)), "upload");
  const float host_scalars[2] = {1.0f / 1024.0f, 0.1f};
  Check(device.CopyToDevice(scalars.data(), host_scalars, sizeof(host_scalars)), "upload");
  Check(device.Zero(flag.data(), sizeof(int32_t)), "zero");
  Check(cuda::FloatToHalf(device, x.data(), half.data(), n), "FloatToHalf");
  Check(device.Synchronize("setup"), "setup");

  std::vector<Row> rows;
  auto run = [&](const std::string& op, double bytes, const std::function<Status()>& fn) {
    rows.push_back({op, bytes, MedianSeconds(device, repetitions, batch, fn)});
  };

  run("copy (reference)", 8 * fn,
      [&] { return device.CopyOnDevice(y.data(), x.data(), n * sizeof(float)); });
  run("FloatToHalf", 6 * fn, [&] { return cuda::FloatToHalf(device, x.data(), half.data(), n); });
  run("UnscaleGradients", 6 * fn, [&] {
    return cuda::UnscaleGradients(device, n, half.data(), scalars.data(), y.data(), flag.data());
  });

  {
    // LARS over 20 tensors of uneven sizes (alternately weights and biases).
    // Bytes: norms read w, g (8n); the update reads w, g, v (12n) and writes
    // w, v (8n) and the FP16 working copy (2n).
    constexpr int kTensors = 20;
    std::vector<cuda::TensorRange> tensors;
    size_t offset = 0;
    for (int t = 0; t < kTensors; ++t) {
      const size_t count =
          t + 1 == kTensors ? n - offset : n / (2 * kTensors) + (n / kTensors) * (t % 3) / 2;
      tensors.push_back({offset, count, t % 2 == 0});
      offset += count;
    }
    auto master = Take(DeviceArray<float>::Create(device, n), "master");
    auto momentum = Take(DeviceArray<float>::Create(device, n), "momentum");
    Check(device.CopyOnDevice(master.data(), x.data(), n * sizeof(float)), "copy");
    Check(device.Zero(momentum.data(), n * sizeof(float)), "zero");
    cuda::FusedOptimizerOptions options;
    options.lars = true;
    auto optimizer = Take(cuda::FusedOptimizer::Create(device, tensors, options), "optimizer");
    run("FusedOptimizer::Step (LARS, 20)", 30 * fn, [&] {
      return optimizer->Step(device, scalars.data() + 1, master.data(), y.data(), momentum.data(),
                             half.data(), nullptr);
    });
  }

  {
    // Encoders: read x (4n), write the payload.
    const size_t chunks = (n + chunk - 1) / chunk;
    auto payload = Take(DeviceArray<std::byte>::Create(
                            device, std::max(cuda::Int8PayloadBytes(n, chunk), 2 * n) + 64),
                        "payload");
    std::byte* p = payload.data() + 16;  // after the codec header, as a node lays it out
    const std::string c = std::to_string(chunk);
    run("EncodeFp16", 6 * fn, [&] { return cuda::EncodeFp16(device, x.data(), n, p); });
    run("EncodeInt8 (chunk " + c + ")", 5 * fn + 4.0 * chunks,
        [&] { return cuda::EncodeInt8(device, x.data(), n, chunk, p); });
    run("EncodeSign (chunk " + c + ")", 4 * fn + fn / 8 + 4.0 * chunks,
        [&] { return cuda::EncodeSign(device, x.data(), n, chunk, p); });
  }

  {
    // Top-k, ratio 0.01: at the least read x (4n) and write 8k.
    const size_t k = std::max<size_t>(1, (n + 99) / 100);
    auto encoder = Take(cuda::TopKEncoder::Create(device, n), "top-k encoder");
    auto payload = Take(DeviceArray<std::byte>::Create(device, cuda::TopKPayloadBytes(k) + 16),
                        "payload");
    run("TopK encode (ratio 0.01)", 4 * fn + 8.0 * k,
        [&] { return encoder->Encode(device, x.data(), n, k, payload.data() + 16); });
  }
  Print(n, rows);
}

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
