// The training step and evaluation (see trainer.h). Must not include gossip/ or
// node/ or know who listens to its hooks.
#include "trainer/trainer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/checksum.h"
#include "common/log.h"
#include "trainer/batch_sampler.h"

namespace chorus::trainer {
namespace {

Status CheckImages(const Model& model, int size, int channels, int height, int width,
                   size_t image_values, size_t label_count, const int32_t* labels,
                   const std::string& what) {
  const SampleShape& in = model.input_shape();
  if (size < 1) return InvalidArgument(what + " is empty");
  if (channels != in.c || height != in.h || width != in.w) {
    return InvalidArgument(what + " has images of " + std::to_string(channels) + "x" +
                           std::to_string(height) + "x" + std::to_string(width) + ", model " +
                           model.name() + " takes " + std::to_string(in.c) + "x" +
                           std::to_string(in.h) + "x" + std::to_string(in.w));
  }
  if (image_values != static_cast<size_t>(size) * in.Elements()) {
    return InvalidArgument(what + " holds " + std::to_string(image_values) + " pixel values for " +
                           std::to_string(size) + " images of " +
                           std::to_string(in.Elements()));
  }
  if (label_count != static_cast<size_t>(size)) {
    return InvalidArgument(what + " has " + std::to_string(label_count) + " labels for " +
                           std::to_string(size) + " images");
  }
  for (int i = 0; i < size; ++i) {
    if (labels[i] < 0 || labels[i] >= model.num_classes()) {
      return InvalidArgument(what + ": label " + std::to_string(labels[i]) + " of image " +
                             std::to_string(i) + " is outside 0.." +
                             std::to_string(model.num_classes() - 1));
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// b / B': a node's batch b over the batch B' whose gradient norm its trust
// ratio should see: `nodes` nodes' batches (0: the global batch), at most the
// global batch; 1 when that is b.
double NormBatchRatio(int batch, int global_batch, int nodes) {
  if (batch <= 0 || nodes == 1) return 1.0;
  double target = static_cast<double>(global_batch);
  if (nodes > 1) target = std::min(target, static_cast<double>(batch) * nodes);
  return target <= batch ? 1.0 : static_cast<double>(batch) / target;
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  const Precision precision = options.precision;
  if (options.batch_size < 1) {
    return Err(InvalidArgument("trainer: batch_size must be >= 1, got " +
                               std::to_string(options.batch_size)));
  }
  if (options.global_batch < 0) {
    return Err(InvalidArgument("trainer: global_batch must be >= 0, got " +
                               std::to_string(options.global_batch)));
  }
  if (options.epochs < 1) {
    return Err(InvalidArgument("trainer: epochs must be >= 1, got " +
                               std::to_string(options.epochs)));
  }
  if (options.steps_per_epoch < 1) {
    return Err(InvalidArgument("trainer: steps_per_epoch must be >= 1, got " +
                               std::to_string(options.steps_per_epoch)));
  }
  if (options.threads < 1) {
    return Err(InvalidArgument("trainer: threads must be >= 1, got " +
                               std::to_string(options.threads)));
  }
  LossScalerOptions scaler_options = options.loss_scale;
  scaler_options.enabled = precision == Precision::kFp16;
  if (!scaler_options.enabled) {
    scaler_options.initial_scale = 1.0;
    scaler_options.min_scale = 1.0;
    scaler_options.max_scale = 1.0;
  }
  CHORUS_RETURN_IF_ERROR(ValidateLossScalerOptions(scaler_options));
  LrScheduleOptions schedule;
  schedule.base_lr = options.base_lr;
  schedule.global_batch = options.global_batch > 0 ? options.global_batch : options.batch_size;
  schedule.warmup_epochs = options.warmup_epochs;
  schedule.power = options.lr_decay_power;
  CHORUS_RETURN_IF_ERROR(ValidateLrScheduleOptions(schedule));

  kernels::SetThreads(options.threads);
  kernels::Context ctx{options.threads};
  CHORUS_ASSIGN_OR_RETURN(auto model, Model::Create(options.model, precision, options.seed, ctx));
  OptimizerOptions optimizer_options;
  optimizer_options.kind = options.optimizer;
  optimizer_options.momentum = options.momentum;
  optimizer_options.weight_decay = options.weight_decay;
  optimizer_options.eta = options.lars_eta;
  if (options.lars_norm_nodes != 1) {
    if (options.device.on_gpu()) {
      return Err(InvalidArgument("trainer: the LARS gradient norm of several nodes' batches runs on the CPU "
                                 "optimizer only"));
    }
    optimizer_options.norm_batch_ratio =
        NormBatchRatio(options.batch_size, schedule.global_batch, options.lars_norm_nodes);
    optimizer_options.peer_products = options.lars_norm_peer;
  }
  if (options.lars_norm_mean && options.device.on_gpu()) {
    return Err(InvalidArgument("trainer: the LARS norm of the members' mean gradient runs on the CPU optimizer only"));
  }
  optimizer_options.mean_squares = options.lars_norm_mean;
  std::vector<ParameterInfo> table(model->parameters().begin(), model->parameters().end());
  CHORUS_ASSIGN_OR_RETURN(auto optimizer, Optimizer::Create(optimizer_options, std::move(table)));
  std::unique_ptr<DeviceModel> device;
  if (options.device.on_gpu()) {
    DeviceModelOptions device_options;
    device_options.ordinal = options.device.cuda_ordinal;
    device_options.optimizer = optimizer_options;
    device_options.cuda_graphs = options.cuda_graphs;
    CHORUS_ASSIGN_OR_RETURN(device, CreateCudaModel(*model, device_options));
  }
  CHORUS_LOG_DEBUG(Subsys::kTrainer, model->Summary());
  auto trainer = std::unique_ptr<Trainer>(new Trainer(
      options, std::move(model), std::move(optimizer), LossScaler(scaler_options), schedule));
  trainer->device_ = std::move(device);
  return trainer;
}

Trainer::Trainer(const TrainerOptions& options, std::unique_ptr<Model> model,
                 std::unique_ptr<Optimizer> optimizer, const LossScaler& scaler,
                 const LrScheduleOptions& schedule)
    : options_(options),
      ctx_{options.threads},
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      loss_scaler_(scaler),
      schedule_(schedule) {}

Status Trainer::HoldTrainingSet(const Dataset& dataset) {
  if (device_ == nullptr) return Status::Ok();
  held_ = nullptr;
  CHORUS_RETURN_IF_ERROR(device_->HoldTrainingSet(dataset.images, dataset.labels, dataset.count,
                                                  static_cast<size_t>(dataset.ImageSize())));
  held_ = &dataset;
  return Status::Ok();
}

Result<ForwardBackwardResult> Trainer::ForwardBackward(const Batch& batch) {
  const bool rows_only = batch.images.empty() && batch.source != nullptr && batch.size > 0;
  if (rows_only && (batch.source != held_ || device_ == nullptr)) {
    CHORUS_RETURN_IF_ERROR(MakeBatch(*batch.source, batch.rows, &gathered_));
    return ForwardBackward(gathered_);
  }
  if (rows_only && batch.rows.size() != static_cast<size_t>(batch.size)) {
    return Err(InvalidArgument("training batch has " + std::to_string(batch.rows.size()) + " rows for " +
                               std::to_string(batch.size) + " images"));
  }
  const size_t image_values =
      rows_only ? static_cast<size_t>(batch.size) * model_->input_shape().Elements() : batch.images.size();
  CHORUS_RETURN_IF_ERROR(CheckImages(*model_, batch.size, batch.channels, batch.height, batch.width, image_values,
                                     batch.labels.size(), batch.labels.data(), "training batch"));
  if (device_ != nullptr) {
    CHORUS_RETURN_IF_ERROR(PushHostChanges());
    CHORUS_ASSIGN_OR_RETURN(
        const DeviceModel::TrainPass pass,
        rows_only ? device_->ForwardBackwardRows(batch.rows.data(), batch.size, loss_scaler_.scale(),
                                                 gradient_weight_)
                  : device_->ForwardBackward(batch.images.data(), batch.labels.data(), batch.size,
                                             loss_scaler_.scale(), gradient_weight_));
    model_->set_num_batches_tracked(model_->num_batches_tracked() + 1);
    buffers_.stale = true;
    grads_ = HostMirror{.stale = true};
    device_grads_finite_ = pass.gradients_finite;
    if (gradient_ready_) {
      // Someone reduces gradients as they become final: on a GPU they all are
      // at once, so hand them over (in the CPU model's order, last first).
      Gradients();
      CHORUS_RETURN_IF_ERROR(std::exchange(device_error_, Status::Ok()));
      for (size_t p = model_->parameters().size(); p-- > 0;) gradient_ready_(static_cast<int>(p));
    }
    return ForwardBackwardResult{pass.result.loss, pass.result.correct, batch.size};
  }
  const Model::PassResult pass =
      model_->ForwardBackward(batch.images.data(), batch.labels.data(), batch.size,
                              loss_scaler_.scale(), gradient_ready_, gradient_weight_);
  return ForwardBackwardResult{pass.loss, pass.correct, batch.size};
}

Result<UpdateResult> Trainer::ApplyUpdate(int64_t step) { return ApplyUpdate(step, static_cast<double>(step)); }

Result<UpdateResult> Trainer::ApplyUpdate(int64_t step, double schedule_step) {
  if (step < 0) return Err(InvalidArgument("trainer: negative step " + std::to_string(step)));
  UpdateResult update;
  update.lr = LearningRate(schedule_step);
  bool finite = true;
  if (device_ != nullptr) {
    CHORUS_RETURN_IF_ERROR(std::exchange(device_error_, Status::Ok()));
    finite = device_grads_finite_;
    if (grads_.out) {
      // The host gradients may have been changed (all-reduced): they are the truth.
      CHORUS_RETURN_IF_ERROR(device_->UploadGradients(model_->gradients()));
      CHORUS_ASSIGN_OR_RETURN(finite, device_->GradientsFinite());
      grads_.out = false;
    }
  } else {
    // The optimizer's norm pass is also the Inf/NaN check.
    finite = optimizer_->Prepare(model_->master(), model_->gradients());
  }
  update.applied = loss_scaler_.Update(finite);
  if (update.applied && device_ != nullptr) {
    CHORUS_RETURN_IF_ERROR(device_->Step(update.lr * update_weight_));
    master_.stale = true;
    momentum_.stale = true;
  } else if (update.applied) {
    // The FP16 working copy is refreshed range by range as the optimizer writes.
    optimizer_->Step(model_->master(), model_->gradients(), update.lr * update_weight_,
                     [this](size_t offset, size_t count) {
                       model_->RefreshWorkingCopy(offset, count);
                     });
  } else {
    if (device_ == nullptr) optimizer_->SkipStep();
    CHORUS_LOG_DEBUG(Subsys::kTrainer, "step ", step, ": Inf/NaN gradients, update skipped, ",
                     "loss scale now ", loss_scaler_.scale());
  }
  update.loss_scale = loss_scaler_.scale();
  if (step_done_) step_done_(step, update);
  return update;
}

Result<StepResult> Trainer::TrainStep(const Batch& batch, int64_t step) {
  StepResult result;
  CHORUS_ASSIGN_OR_RETURN(result.pass, ForwardBackward(batch));
  CHORUS_ASSIGN_OR_RETURN(result.update, ApplyUpdate(step));
  return result;
}

Result<EvalResult> Trainer::Evaluate(const Dataset& dataset, int batch) {
  if (batch < 1) return Err(InvalidArgument("evaluate: batch must be >= 1"));
  CHORUS_RETURN_IF_ERROR(CheckImages(*model_, dataset.count, dataset.channels, dataset.height,
                                     dataset.width, dataset.images.size(), dataset.labels.size(),
                                     dataset.labels.data(),
                                     "evaluation data set '" + dataset.description + "'"));
  const size_t image = model_->input_shape().Elements();
  double loss_sum = 0.0;
  int64_t correct = 0;
  if (device_ != nullptr) CHORUS_RETURN_IF_ERROR(PushHostChanges());
  for (int start = 0; start < dataset.count; start += batch) {
    const int n = std::min(batch, dataset.count - start);
    const float* images = dataset.images.data() + static_cast<size_t>(start) * image;
    const int32_t* labels = dataset.labels.data() + start;
    Model::PassResult pass;
    if (device_ != nullptr) {
      CHORUS_ASSIGN_OR_RETURN(pass, device_->Evaluate(images, labels, n));
    } else {
      pass = model_->Evaluate(images, labels, n);
    }
    loss_sum += pass.loss * n;
    correct += pass.correct;
  }
  EvalResult result;
  result.count = dataset.count;
  result.accuracy = static_cast<double>(correct) / dataset.count;
  result.loss = loss_sum / dataset.count;
  return result;
}

void Trainer::Pull(HostMirror& mirror, Status (DeviceModel::*download)(std::span<float>),
                   std::span<float> host) const {
  if (device_ == nullptr || !mirror.stale) return;
  KeepError(((*device_).*download)(host));
  mirror.stale = false;
}

Status Trainer::PushHostChanges() {
  CHORUS_RETURN_IF_ERROR(std::exchange(device_error_, Status::Ok()));
  // The pass reads the device master: push what the host changed first.
  if (master_.out || momentum_.out) RefreshWorkingCopy();
  return std::exchange(device_error_, Status::Ok());
}

std::span<float> Trainer::MasterWeights() {
  Pull(master_, &DeviceModel::DownloadMaster, model_->master());
  master_.out = device_ != nullptr;
  return model_->master();
}

std::span<const float> Trainer::MasterWeights() const {
  Pull(master_, &DeviceModel::DownloadMaster, model_->master());
  return model_->master();
}

std::span<float> Trainer::Gradients() {
  Pull(grads_, &DeviceModel::DownloadGradients, model_->gradients());
  grads_.out = device_ != nullptr;
  return model_->gradients();
}

void Trainer::ReplaceGradientStorage() {
  model_->ReplaceGradientStorage();
  grads_ = HostMirror{.stale = true};  // on a GPU, downloaded again on use
}

std::span<float> Trainer::Momentum() {
  Pull(momentum_, &DeviceModel::DownloadMomentum, optimizer_->momentum());
  momentum_.out = device_ != nullptr;
  return optimizer_->momentum();
}

void Trainer::RefreshWorkingCopy() {
  if (device_ == nullptr) {
    model_->RefreshWorkingCopy();
    return;
  }
  // A master span may have been taken before the last step and changed since;
  // the host copy is what the caller means either way once it refreshes.
  if (!master_.stale) KeepError(device_->UploadMaster(model_->master()));
  if (momentum_.out && !momentum_.stale) KeepError(device_->UploadMomentum(optimizer_->momentum()));
  master_.out = false;
  momentum_.out = false;
}

Status Trainer::SyncToHost() const {
  Pull(master_, &DeviceModel::DownloadMaster, model_->master());
  Pull(momentum_, &DeviceModel::DownloadMomentum, optimizer_->momentum());
  Pull(buffers_, &DeviceModel::DownloadBuffers, model_->buffer_values());
  return std::exchange(device_error_, Status::Ok());
}

Status Trainer::SyncToDevice() {
  if (device_ == nullptr) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(std::exchange(device_error_, Status::Ok()));
  CHORUS_RETURN_IF_ERROR(device_->UploadMaster(model_->master()));
  CHORUS_RETURN_IF_ERROR(device_->UploadMomentum(optimizer_->momentum()));
  CHORUS_RETURN_IF_ERROR(device_->UploadBuffers(model_->buffer_values()));
  master_ = momentum_ = buffers_ = HostMirror{};
  return Status::Ok();
}

std::string Trainer::DeviceDescription() const {
  return device_ != nullptr ? device_->description() : std::string("cpu");
}

uint64_t Trainer::ParameterChecksum() const { return WeightsChecksum(MasterWeights()); }

Status Trainer::SetSchedule(int64_t steps_per_epoch, int global_batch) {
  if (steps_per_epoch < 1 || global_batch < 1) {
    return InvalidArgument("trainer: schedule of " + std::to_string(steps_per_epoch) + " steps per epoch, global batch " +
                           std::to_string(global_batch) + " (both must be >= 1)");
  }
  options_.steps_per_epoch = steps_per_epoch;
  options_.global_batch = global_batch;
  schedule_.global_batch = global_batch;
  if (options_.lars_norm_nodes != 1) {
    optimizer_->SetNormBatchRatio(NormBatchRatio(options_.batch_size, global_batch, options_.lars_norm_nodes));
  }
  return Status::Ok();
}

double Trainer::LearningRate(double step) const {
  return trainer::LearningRate(step, options_.steps_per_epoch, options_.epochs, schedule_);
}

}  // namespace chorus::trainer
