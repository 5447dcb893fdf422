// bench_train: training throughput (samples/s) of one node: mlp and cnn, batch
// 64 and 256, fp32 and fp16, N threads. Mirrors the `bench` mode of the peer
// baseline's PyTorch CPU training script (train_torch.py: real Fashion-MNIST
// batches gathered per step, warm-up, then windows of ~window_s seconds;
// median) so the two can be run back to back and compared as ratios
// (bench/compare_peers.sh train; docs/performance.md, "Single-node training
// against PyTorch"). Also prints peak RSS.
//
//   bench_train [--models mlp,cnn] [--batches 64,256] [--precisions fp32,fp16]
//               [--threads 2] [--windows 7] [--window-s 2] [--warmup 30] [--optimizer lars]
//               [--device cpu|cuda:N] [--no-cuda-graphs] [--conv auto|im2col]
//               [--gemm auto|blas]
//
// On a GPU (--device cuda:0) only fp16 runs (GPU nodes train in fp16); the GPU
// table is `bench_train --device cuda:0 --models mlp,cnn,cnn-bn
// --batches 64,256,1024 --precisions fp16`, beside bench/torch_amp_gpu.py
// (docs/gpu.md, "Benchmarks").
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/clock.h"
#include "kernels/ops.h"
#include "trainer/batch_sampler.h"
#include "trainer/dataset.h"
#include "trainer/trainer.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

struct Args {
  std::string models = "mlp,cnn", batches = "64,256", precisions = "fp32,fp16";
  std::string optimizer = "lars", data_dir = "/usr/share/datasets/fashion-mnist";
  int threads = 2, windows = 7, warmup = 30;
  double window_s = 2.0;
  std::string device = "cpu";
  bool no_graphs = false;
  std::string conv = "auto";
  std::string gemm = "auto";
};

void DeclareOptions(CLI::App& app, Args& a) {
  app.add_option("--models", a.models, "Comma-separated models (" +
                                           chorus::JoinNames(chorus::NamesOf(chorus::trainer::kModelNames), ", ") +
                                           ")");
  app.add_option("--batches", a.batches, "Comma-separated batch sizes");
  app.add_option("--precisions", a.precisions,
                 "Comma-separated precisions (" +
                     chorus::JoinNames(chorus::NamesOf(chorus::trainer::kPrecisionNames), ", ") + ")");
  app.add_option("--optimizer", a.optimizer, chorus::JoinNames(chorus::NamesOf(chorus::trainer::kOptimizerNames), " or "));
  app.add_option("--threads", a.threads, "Compute threads");
  app.add_option("--windows", a.windows, "Measurement windows (the median is reported)");
  app.add_option("--window-s", a.window_s, "Seconds per window");
  app.add_option("--warmup", a.warmup, "Warm-up steps");
  app.add_option("--data", a.data_dir, "Fashion-MNIST folder");
  app.add_option("--device", a.device, "cpu, cuda or cuda:N");
  app.add_flag("--no-cuda-graphs", a.no_graphs, "GPU: launch every kernel instead of graph replays");
  app.add_option("--conv", a.conv, "CPU convolutions: auto (oneDNN when built with it) or im2col")
      ->check(CLI::IsMember({"auto", "im2col"}));
  app.add_option("--gemm", a.gemm, "CPU float GEMMs: auto (oneDNN when built with it) or blas (OpenBLAS)")
      ->check(CLI::IsMember({"auto", "blas"}));
}

// One row's trainer; an error names the bad model, precision or option.
chorus::Result<std::unique_ptr<chorus::trainer::Trainer>> MakeTrainer(const Args& a, const std::string& model,
                                                                       const std::string& precision, int batch,
                                                                       int train_count) {
  namespace trainer = chorus::trainer;
  const auto model_kind = chorus::FromName(trainer::kModelNames, model);
  const auto precision_kind = chorus::FromName(trainer::kPrecisionNames, precision);
  const auto optimizer_kind = chorus::FromName(trainer::kOptimizerNames, a.optimizer);
  if (!model_kind || !precision_kind || !optimizer_kind) {
    return chorus::Err(chorus::InvalidArgument("unknown model " + model + ", precision " + precision +
                                               " or optimizer " + a.optimizer));
  }
  CHORUS_ASSIGN_OR_RETURN(trainer::Device device, trainer::ParseDevice(a.device));
  trainer::TrainerOptions o;
  o.device = device;
  o.cuda_graphs = !a.no_graphs;
  o.model = *model_kind;
  o.precision = *precision_kind;
  o.optimizer = *optimizer_kind;
  o.batch_size = batch;
  o.global_batch = batch;
  o.epochs = 100;
  o.steps_per_epoch = train_count / batch;
  o.threads = a.threads;
  return trainer::Trainer::Create(o);
}

// Samples/s of `windows` windows after the warm-up steps.
chorus::Result<std::vector<double>> Measure(const Args& a, chorus::trainer::Trainer& trainer,
                                            const chorus::trainer::Dataset& train, int batch) {
  chorus::trainer::BatchSampler sampler(train.count, batch, 1, 0, 1);
  chorus::trainer::Batch x;
  int epoch = 0;
  int64_t step = 0;
  CHORUS_RETURN_IF_ERROR(trainer.HoldTrainingSet(train));
  const chorus::trainer::BatchContents contents = trainer.ContentsFor(train);
  auto one_step = [&]() -> chorus::Status {
    if (!sampler.Next(train, &x, contents)) {
      sampler.StartEpoch(++epoch);
      sampler.Next(train, &x, contents);
    }
    auto r = trainer.TrainStep(x, step++);
    return r ? chorus::Status::Ok() : r.error();
  };
  double t0 = chorus::NowSeconds();
  for (int i = 0; i < a.warmup; ++i) CHORUS_RETURN_IF_ERROR(one_step());
  const double per_step = (chorus::NowSeconds() - t0) / std::max(1, a.warmup);
  const int steps_per_window = std::max(5, static_cast<int>(a.window_s / per_step));
  std::vector<double> rates;
  for (int w = 0; w < a.windows; ++w) {
    t0 = chorus::NowSeconds();
    for (int i = 0; i < steps_per_window; ++i) CHORUS_RETURN_IF_ERROR(one_step());
    rates.push_back(steps_per_window * batch / (chorus::NowSeconds() - t0));
  }
  return rates;
}

// One table row; false after printing why it could not run.
bool RunRow(const Args& a, const chorus::trainer::Dataset& train, const std::string& model,
            const std::string& precision, int batch) {
  auto trainer = MakeTrainer(a, model, precision, batch, train.count);
  if (!trainer) {
    std::fprintf(stderr, "bench_train: %s\n", trainer.error().ToString().c_str());
    return false;
  }
  auto rates = Measure(a, **trainer, train, batch);
  if (!rates) {
    std::fprintf(stderr, "bench_train: %s\n", rates.error().ToString().c_str());
    return false;
  }
  std::printf("%-7s %-5s %6d %8d %12.0f %12.0f %12.0f  %s\n", model.c_str(), precision.c_str(), batch, a.threads,
              Median(*rates), *std::min_element(rates->begin(), rates->end()),
              *std::max_element(rates->begin(), rates->end()), (*trainer)->DeviceDescription().c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {  // see node/main.cc
    setenv("OMP_WAIT_POLICY", "passive", 0);
    execv("/proc/self/exe", argv);
  }
  CLI::App app{"Chorus training throughput benchmark"};
  Args args;
  DeclareOptions(app, args);
  CLI11_PARSE(app, argc, argv);
  auto device = chorus::trainer::ParseDevice(args.device);
  if (!device) {
    std::fprintf(stderr, "bench_train: %s\n", device.error().ToString().c_str());
    return 2;
  }
  chorus::kernels::SetGemmBackend(args.gemm == "blas" ? chorus::kernels::GemmBackend::kBlas
                                                      : chorus::kernels::GemmBackend::kAuto);
  chorus::kernels::SetConvBackend(args.conv == "im2col" ? chorus::kernels::ConvBackend::kIm2col
                                                        : chorus::kernels::ConvBackend::kAuto);
  auto train = chorus::trainer::LoadFashionMnist(args.data_dir, chorus::trainer::Split::kTrain, 0);
  if (!train) {
    std::fprintf(stderr, "bench_train: %s\n", train.error().ToString().c_str());
    return 1;
  }
  // What the CPU kernels run on, so that a figure says it (bench/compare_peers.sh
  // puts it beside the BLAS PyTorch loaded).
  std::printf("# gemm: %s; convolutions: %s\n", chorus::kernels::GemmDescription().c_str(),
              chorus::kernels::ConvUsesOnednn() ? "oneDNN" : "im2col + GEMM");
  chorus::kernels::SetThreads(args.threads);
  std::printf("# a parallel region of %d threads: %.1f us\n", args.threads,
              chorus::kernels::ParallelRegionSeconds() * 1e6);
  std::printf("%-7s %-5s %6s %8s %12s %12s %12s  device\n", "model", "prec", "batch", "threads", "median/s", "min/s",
              "max/s");
  for (const std::string& model : Split(args.models)) {
    for (const std::string& b : Split(args.batches)) {
      for (const std::string& precision : Split(args.precisions)) {
        // GPU nodes train in fp16.
        const auto kind = chorus::FromName(chorus::trainer::kPrecisionNames, precision);
        if (device->on_gpu() && kind != chorus::trainer::Precision::kFp16) continue;
        if (!RunRow(args, *train, model, precision, std::stoi(b))) return 1;
      }
    }
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak RSS %.1f MiB\n", usage.ru_maxrss / 1024.0);
  return 0;
}
