// A replica of a Model that trains on a GPU: the device-resident half of a
// Trainer whose `device` is "cuda:N" (trainer.h).
//
// The host Model, Optimizer and LossScaler stay the one source of truth for
// shapes, names, initialisation, checkpoints and the loss-scale state machine;
// the device model holds the working state (FP32 master, momentum, FP16
// working copy and its FP32 expansion, BatchNorm statistics, gradients) and
// runs the same pass as Model in FP16 (model.h): FP16 activations, FP32
// accumulation, scaled FP16 parameter gradients unscaled into FP32 with a
// finite check, and the fused LARS / SGD update of optimizer.h. The Trainer
// copies state between the two only when someone outside asks for host spans
// (an exchange, a checkpoint), through pinned staging buffers.
//
// Implemented by trainer/cuda/cuda_model.cc in builds with the CUDA backend; in
// other builds CreateCudaModel says why there is none. Plain C++ (no CUDA
// headers). Not thread-safe: the trainer's thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"

namespace chorus::trainer {

struct DeviceModelOptions {
  int ordinal = 0;
  OptimizerOptions optimizer;
  // Replays the training pass of each batch size as a CUDA graph after its
  // first (eager) run; falls back to eager launches if capture fails.
  bool cuda_graphs = true;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, ...)"
  virtual const std::string& description() const = 0;

  // Host -> device: master (and the working copy derived from it), momentum and
  // BatchNorm buffers, each laid out as the host model's.
  [[nodiscard]] virtual Status UploadMaster(std::span<const float> master) = 0;
  [[nodiscard]] virtual Status UploadMomentum(std::span<const float> momentum) = 0;
  [[nodiscard]] virtual Status UploadBuffers(std::span<const float> buffers) = 0;
  // Replaces the device's unscaled FP32 gradients (after an all-reduce on the host).
  [[nodiscard]] virtual Status UploadGradients(std::span<const float> gradients) = 0;

  // Device -> host (synchronous).
  [[nodiscard]] virtual Status DownloadMaster(std::span<float> master) = 0;
  [[nodiscard]] virtual Status DownloadMomentum(std::span<float> momentum) = 0;
  [[nodiscard]] virtual Status DownloadBuffers(std::span<float> buffers) = 0;
  [[nodiscard]] virtual Status DownloadGradients(std::span<float> gradients) = 0;

  struct TrainPass {
    Model::PassResult result;
    bool gradients_finite = true;
  };
  // One training pass of n images [n, input] (host memory) and labels [n]:
  // leaves the unscaled FP32 gradients times `gradient_weight` (the node's
  // sample weight, Trainer::SetSampleWeights) on the device and says whether
  // they are all finite. Updates the BatchNorm running statistics.
  [[nodiscard]] virtual Result<TrainPass> ForwardBackward(const float* images,
                                                          const int32_t* labels, int n,
                                                          double loss_scale,
                                                          double gradient_weight) = 0;
  // Keeps a training set on the device (FP16, as the pass would round it, and
  // its labels): `count` images of `image` floats each. Replaces any set held
  // before.
  [[nodiscard]] virtual Status HoldTrainingSet(std::span<const float> images, std::span<const int32_t> labels,
                                               int count, size_t image) = 0;
  // ForwardBackward on the held set's samples `rows` [n]: the batch is gathered
  // on the device (one copy of n indices per step), the same pass bit for bit.
  // Errors name a row outside the set, or that none is held.
  [[nodiscard]] virtual Result<TrainPass> ForwardBackwardRows(const int32_t* rows, int n, double loss_scale,
                                                              double gradient_weight) = 0;
  // Finite check of the device gradients (after UploadGradients).
  [[nodiscard]] virtual Result<bool> GradientsFinite() = 0;
  // One optimizer step at `lr` on the device: master, momentum, working copy.
  [[nodiscard]] virtual Status Step(double lr) = 0;
  // LARS local lr per parameter of the last Step (synchronises).
  [[nodiscard]] virtual Result<std::vector<double>> LastLocalLr() = 0;

  // Evaluation-mode pass (BatchNorm running statistics).
  [[nodiscard]] virtual Result<Model::PassResult> Evaluate(const float* images,
                                                           const int32_t* labels, int n) = 0;

  // Passes replayed from a CUDA graph so far (for the log and tests).
  virtual int64_t graph_replays() const = 0;
};

// A device replica of `model` (same layers and parameter layout; the model
// must be in fp16 precision) on GPU options.ordinal, with the model's current
// master, zero momentum and its BatchNorm buffers uploaded. Errors say why:
// no CUDA backend in this build, no GPU, ordinal out of range, fp32 asked for.
[[nodiscard]] Result<std::unique_ptr<DeviceModel>> CreateCudaModel(
    const Model& model, const DeviceModelOptions& options);

}  // namespace chorus::trainer
