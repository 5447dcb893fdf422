// trainer/: layers, models, FP16 mixed precision, loss scaling, LARS, schedules,
// data, checkpoints; never includes gossip/ or node/.
//
// The single-node training step: model + loss scaler + optimizer + LR schedule.
//
//   ForwardBackward(batch)  forward and backward; the FP32 gradient buffer gets
//                           the unscaled gradients; GradientReadyHook fires per
//                           parameter as each becomes final (last layer first).
//   (someone may all-reduce Gradients() here)
//   ApplyUpdate(step)       finite check of the FP32 gradients, loss-scaler update,
//                           optimizer step on the FP32 master (or skip), refresh of
//                           the FP16 working copy; then StepDoneHook.
//   (someone may gossip-mix MasterWeights() here, then call RefreshWorkingCopy())
//
// On a GPU (options.device "cuda:N") the pass and the update run on the device
// (device_model.h) and the host model, optimizer momentum and gradient buffer
// become mirrors, copied on demand: Gradients() downloads the gradients (and
// ApplyUpdate uploads them back, as an all-reduce changed them);
// MasterWeights() downloads the master (and RefreshWorkingCopy() uploads it,
// as a gossip mix changed it); Momentum() likewise. SyncToHost() brings every
// mirror up to date (checkpoints), SyncToDevice() pushes them (restore).
// A device error is kept and returned by the next call that returns a Status.
//
// The trainer never knows who listens to its hooks and never includes gossip/
// or node/. Not thread-safe: one thread drives it; hooks run on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "kernels/ops.h"
#include "trainer/batch.h"
#include "trainer/dataset.h"
#include "trainer/device_model.h"
#include "trainer/loss_scaler.h"
#include "trainer/lr_schedule.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/parameter.h"

namespace chorus::trainer {

// The hyper-parameter defaults were tuned on Fashion-MNIST (batch 64, 5
// epochs, fp16 + LARS); the accuracy they reach: docs/performance.md
// ("Single-node training against PyTorch"). With LARS a weight's step is about
// lr * eta * ||w|| / ||g||, so base_lr is large; biases and BatchNorm
// parameters see lr itself.
struct TrainerOptions {
  ModelKind model = ModelKind::kMlp;
  Precision precision = Precision::kFp16;  // kFp32 disables loss scaling
  OptimizerKind optimizer = OptimizerKind::kLars;
  double base_lr = 2.0;             // lr for a global batch of 256 (linear scaling)
  double momentum = 0.9;
  double weight_decay = 5e-4;       // weights only; never biases or BatchNorm parameters
  double lars_eta = 0.01;           // LARS trust coefficient
  // LARS: the trust ratio sees the gradient norm of a batch of this many
  // nodes' batches, estimated from this node's (optimizer.h:
  // norm_batch_ratio), for a node whose update uses its own gradient: 1 (or
  // less): its own norm; 0: the global batch's. CPU only.
  int lars_norm_nodes = 1;
  // With lars_norm_nodes != 1: that norm is estimated from products with
  // peers' gradients (Optimizer::SetPeerProducts), not successive ones.
  bool lars_norm_peer = false;
  // LARS: the norm of the members' mean gradient, which an exchange hands the
  // optimizer each step (Optimizer::SetMeanSquares). CPU only.
  bool lars_norm_mean = false;
  double warmup_epochs = 1.0;       // linear warm-up length
  double lr_decay_power = 2.0;      // polynomial decay to 0 at the end of training
  LossScalerOptions loss_scale;     // `enabled` is set from precision
  int batch_size = 64;              // this node's batch
  int global_batch = 0;             // all nodes' batches together; 0: batch_size
  int epochs = 5;                   // schedule length
  int64_t steps_per_epoch = 0;      // this node's steps per epoch (>= 1, required)
  uint64_t seed = 1;                // parameter initialisation
  int threads = 1;                  // kernels::SetThreads() at construction
  Device device;                    // the CPU, or a GPU (fp16 only)
  bool cuda_graphs = true;          // GPU: replay each pass as a CUDA graph
};

struct ForwardBackwardResult {
  double loss = 0.0;  // mean over the batch
  int correct = 0;
  int samples = 0;
};

struct UpdateResult {
  bool applied = false;     // false: skipped (Inf/NaN gradients)
  double lr = 0.0;          // the schedule's lr for this step (even when skipped)
  double loss_scale = 1.0;  // the scale after this step's update
};

struct StepResult {
  ForwardBackwardResult pass;
  UpdateResult update;
};

struct EvalResult {
  double accuracy = 0.0;  // correct / count
  double loss = 0.0;      // mean cross-entropy
  int count = 0;
};

using GradientReadyHook = std::function<void(int param_index)>;
using StepDoneHook = std::function<void(int64_t step, const UpdateResult& update)>;

class Trainer {
 public:
  // Validates the options (errors name the field or the unknown model /
  // precision / optimizer), builds the model and calls kernels::SetThreads.
  [[nodiscard]] static Result<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);

  // Training forward + backward. The batch must be [size, 1, 28, 28] with labels
  // in range; size >= 1. A batch of rows alone (BatchContents::kRows) is
  // gathered on the device that holds its data set, else on the host.
  [[nodiscard]] Result<ForwardBackwardResult> ForwardBackward(const Batch& batch);
  // GPU: keeps `dataset` (the training set) on the device, so that batches of
  // its rows alone are gathered there: one copy of the indices per step
  // instead of the images. `dataset` must outlive the trainer and not change.
  // On the CPU nothing is kept. Errors from the upload.
  [[nodiscard]] Status HoldTrainingSet(const Dataset& dataset);
  // What a batch of `dataset` should carry here: its rows alone where the
  // device holds it, else its images.
  BatchContents ContentsFor(const Dataset& dataset) const {
    return held_ == &dataset ? BatchContents::kRows : BatchContents::kImages;
  }
  // Finite check, loss-scaler update, optimizer step at lr(step), working-copy refresh.
  [[nodiscard]] Result<UpdateResult> ApplyUpdate(int64_t step);
  // The same at a schedule position other than `step` (lr_schedule.h: where the
  // node's epochs hold another number of steps than the schedule's).
  [[nodiscard]] Result<UpdateResult> ApplyUpdate(int64_t step, double schedule_step);
  // ForwardBackward then ApplyUpdate.
  [[nodiscard]] Result<StepResult> TrainStep(const Batch& batch, int64_t step);

  // Evaluation mode over the whole data set, `batch` images at a time.
  [[nodiscard]] Result<EvalResult> Evaluate(const Dataset& dataset, int batch);

  // The FP32 master weights (on a GPU: downloaded on first use after a step).
  std::span<float> MasterWeights();
  std::span<const float> MasterWeights() const;
  // The unscaled FP32 gradients of the last pass (on a GPU: downloaded, and
  // uploaded again by ApplyUpdate since the caller may change them).
  std::span<float> Gradients();
  // Moves the host gradients to fresh storage and keeps the old for good
  // (Model::ReplaceGradientStorage): for when a transport may still write
  // into spans of Gradients() taken before.
  void ReplaceGradientStorage();
  // The optimizer's momentum (on a GPU: downloaded; uploaded by RefreshWorkingCopy).
  std::span<float> Momentum();
  std::span<const ParameterInfo> Parameters() const { return model_->parameters(); }
  // Re-derives the FP16 working copy after the master was changed from outside
  // (on a GPU: uploads the master, and the momentum if Momentum() was taken).
  void RefreshWorkingCopy();
  // GPU: copies master, momentum and BatchNorm buffers to the host mirrors /
  // to the device. No-ops on the CPU.
  [[nodiscard]] Status SyncToHost() const;
  [[nodiscard]] Status SyncToDevice();
  // "cpu" or the GPU's description.
  std::string DeviceDescription() const;
  bool on_gpu() const { return device_ != nullptr; }
  const DeviceModel* device_model() const { return device_.get(); }
  // WeightsChecksum of the master (common/checksum.h): equal on every node for
  // equal weights.
  uint64_t ParameterChecksum() const;

  void SetGradientReadyHook(GradientReadyHook hook) { gradient_ready_ = std::move(hook); }
  void SetStepDoneHook(StepDoneHook hook) { step_done_ = std::move(hook); }

  double LearningRate(double step) const;
  // This node's weight among unequal nodes (1 alone or among equal ones):
  // `gradient` multiplies each pass's gradients (before any hook sees them),
  // `update` the lr of each update. A node whose batch is b of a global batch
  // B over W nodes weighs W * b / B, so that every sample counts the same.
  void SetSampleWeights(double gradient, double update) {
    gradient_weight_ = gradient;
    update_weight_ = update;
  }
  // The schedule's unit and scale: steps per epoch and the global batch (linear
  // scaling). A node that joins a running cluster takes the cluster's; the
  // global batch follows the membership.
  [[nodiscard]] Status SetSchedule(int64_t steps_per_epoch, int global_batch);
  const TrainerOptions& options() const { return options_; }
  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  LossScaler& loss_scaler() { return loss_scaler_; }
  const LossScaler& loss_scaler() const { return loss_scaler_; }

 private:
  Trainer(const TrainerOptions& options, std::unique_ptr<Model> model,
          std::unique_ptr<Optimizer> optimizer, const LossScaler& scaler,
          const LrScheduleOptions& schedule);

  TrainerOptions options_;
  kernels::Context ctx_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  LossScaler loss_scaler_;
  LrScheduleOptions schedule_;
  GradientReadyHook gradient_ready_;
  StepDoneHook step_done_;
  double gradient_weight_ = 1.0;
  double update_weight_ = 1.0;
  const Dataset* held_ = nullptr;  // the training set the device holds
  Batch gathered_;                 // a batch of rows gathered on the host

  // GPU only. One host copy of device state: `stale` when the device has newer
  // values, `out` when a mutable span was handed out (the caller may have
  // changed it, so the device must get it back).
  struct HostMirror {
    bool stale = false;
    bool out = false;
  };
  // Downloads `host` from the device when the mirror is stale.
  void Pull(HostMirror& mirror, Status (DeviceModel::*download)(std::span<float>),
            std::span<float> host) const;
  // Before a device pass: uploads what the host changed (master, momentum).
  [[nodiscard]] Status PushHostChanges();
  std::unique_ptr<DeviceModel> device_;
  mutable HostMirror master_, momentum_, buffers_;
  HostMirror grads_{.stale = true};
  bool device_grads_finite_ = true;
  mutable Status device_error_;
  void KeepError(const Status& s) const {
    if (!s.ok() && device_error_.ok()) device_error_ = s;
  }
};

}  // namespace chorus::trainer
