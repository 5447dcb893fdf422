// Checkpoint save/load and model export over safetensors (see checkpoint.h).
// Validates every tensor before touching the trainer; never picks file names.
#include "trainer/checkpoint.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "common/files.h"
#include "common/log.h"
#include "trainer/safetensors.h"

namespace chorus::trainer {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this code copies host bytes");

constexpr const char* kCheckpointKey = "chorus_checkpoint";
constexpr const char* kCheckpointVersion = "1";
constexpr const char* kMomentumPrefix = "momentum.";
constexpr std::string_view kExchangePrefix = "exchange.";
constexpr const char* kRunningMeanSuffix = ".running_mean";
constexpr const char* kBatchesTrackedSuffix = ".num_batches_tracked";

NamedTensor F32Tensor(const std::string& name, const std::vector<int64_t>& shape,
                      const float* data, size_t count) {
  NamedTensor t{name, "F32", shape, std::vector<uint8_t>(count * sizeof(float))};
  std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

NamedTensor I64Scalar(const std::string& name, int64_t value) {
  NamedTensor t{name, "I64", {}, std::vector<uint8_t>(sizeof(int64_t))};
  std::memcpy(t.bytes.data(), &value, sizeof(value));
  return t;
}

// BatchNorm module names ("bn1"), from the buffers named "<bn>.running_mean".
std::vector<std::string> BatchNormNames(const Model& model) {
  std::vector<std::string> names;
  const std::string suffix = kRunningMeanSuffix;
  for (const BufferInfo& b : model.buffers()) {
    if (b.name.size() > suffix.size() &&
        b.name.compare(b.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(b.name.substr(0, b.name.size() - suffix.size()));
    }
  }
  return names;
}

// Parameters, buffers and num_batches_tracked: what PyTorch's state_dict holds.
std::vector<NamedTensor> StateDictTensors(const Model& model) {
  std::vector<NamedTensor> tensors;
  const std::span<const float> master = model.master();
  for (const ParameterInfo& p : model.parameters()) {
    tensors.push_back(F32Tensor(p.name, p.shape, master.data() + p.offset, p.count));
  }
  const std::span<const float> values = model.buffer_values();
  for (const BufferInfo& b : model.buffers()) {
    tensors.push_back(F32Tensor(b.name, b.shape, values.data() + b.offset, b.count));
  }
  for (const std::string& bn : BatchNormNames(model)) {
    tensors.push_back(I64Scalar(bn + kBatchesTrackedSuffix, model.num_batches_tracked()));
  }
  return tensors;
}

std::string DoubleToString(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest round trip
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

Result<std::string> GetMeta(const SafetensorsFile& file, const std::string& path,
                            const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) {
    return Err(DataLoss(path + ": checkpoint metadata has no '" + key + "'"));
  }
  return it->second;
}

template <typename T>
Result<T> GetMetaNumber(const SafetensorsFile& file, const std::string& path,
                        const std::string& key) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, GetMeta(file, path, key));
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Err(DataLoss(path + ": checkpoint metadata '" + key + "' is not a number: '" + text +
                        "'"));
  }
  return value;
}

// The tensor `name` with dtype and shape as expected.
Result<const NamedTensor*> FindTensor(const SafetensorsFile& file, const std::string& path,
                                      const std::string& name, const std::string& dtype,
                                      const std::vector<int64_t>& shape) {
  const NamedTensor* t = file.Find(name);
  if (t == nullptr) return Err(NotFound(path + ": tensor '" + name + "' is missing"));
  if (t->dtype != dtype) {
    return Err(InvalidArgument(path + ": tensor '" + name + "' has dtype " + t->dtype +
                               ", expected " + dtype));
  }
  if (t->shape != shape) {
    return Err(InvalidArgument(path + ": tensor '" + name + "' has shape " +
                               ShapeToString(t->shape) + ", expected " + ShapeToString(shape)));
  }
  return t;
}

// A validated copy plan: tensors found, nothing changed yet.
struct WeightPlan {
  std::vector<const NamedTensor*> params;   // per parameter
  std::vector<const NamedTensor*> buffers;  // per buffer
  const NamedTensor* batches_tracked = nullptr;
  std::set<std::string> consumed;
};

Result<WeightPlan> PlanWeights(const SafetensorsFile& file, const std::string& path,
                               const Model& model) {
  WeightPlan plan;
  for (const ParameterInfo& p : model.parameters()) {
    CHORUS_ASSIGN_OR_RETURN(const NamedTensor* t, FindTensor(file, path, p.name, "F32", p.shape));
    plan.params.push_back(t);
    plan.consumed.insert(p.name);
  }
  for (const BufferInfo& b : model.buffers()) {
    CHORUS_ASSIGN_OR_RETURN(const NamedTensor* t, FindTensor(file, path, b.name, "F32", b.shape));
    plan.buffers.push_back(t);
    plan.consumed.insert(b.name);
  }
  for (const std::string& bn : BatchNormNames(model)) {
    const std::string name = bn + kBatchesTrackedSuffix;
    CHORUS_ASSIGN_OR_RETURN(const NamedTensor* t, FindTensor(file, path, name, "I64", {}));
    if (plan.batches_tracked == nullptr) plan.batches_tracked = t;
    plan.consumed.insert(name);
  }
  return plan;
}

void ApplyWeights(const WeightPlan& plan, Model* model) {
  const std::span<float> master = model->master();
  for (size_t i = 0; i < plan.params.size(); ++i) {
    std::memcpy(master.data() + model->parameters()[i].offset, plan.params[i]->bytes.data(),
                plan.params[i]->bytes.size());
  }
  const std::span<float> values = model->buffer_values();
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    std::memcpy(values.data() + model->buffers()[i].offset, plan.buffers[i]->bytes.data(),
                plan.buffers[i]->bytes.size());
  }
  if (plan.batches_tracked != nullptr) {
    int64_t tracked = 0;
    std::memcpy(&tracked, plan.batches_tracked->bytes.data(), sizeof(tracked));
    model->set_num_batches_tracked(tracked);
  }
  model->RefreshWorkingCopy();
}

Status CheckNoUnexpected(const SafetensorsFile& file, const std::string& path,
                         const std::set<std::string>& consumed, bool ignore_momentum) {
  for (const NamedTensor& t : file.tensors) {
    if (consumed.count(t.name) > 0) continue;
    if (ignore_momentum && t.name.rfind(kMomentumPrefix, 0) == 0) continue;
    return InvalidArgument(path + ": unexpected tensor '" + t.name +
                           "' (not in this model; wrong model or corrupt file?)");
  }
  return Status::Ok();
}

}  // namespace

Status SaveCheckpoint(const Trainer& trainer, const CheckpointInfo& info,
                      const std::string& path) {
  Result<std::vector<uint8_t>> bytes = CheckpointBytes(trainer, info);
  Status status = bytes ? WriteFileAtomic(path, *bytes) : bytes.error();
  if (!status.ok()) return status.WithContext("saving checkpoint " + path);
  return Status::Ok();
}

Result<std::vector<uint8_t>> CheckpointBytes(const Trainer& trainer, const CheckpointInfo& info) {
  CHORUS_RETURN_IF_ERROR(trainer.SyncToHost());  // GPU: the host mirrors
  const Model& model = trainer.model();
  std::vector<NamedTensor> tensors = StateDictTensors(model);
  const std::span<const float> momentum = trainer.optimizer().momentum();
  for (const ParameterInfo& p : model.parameters()) {
    tensors.push_back(
        F32Tensor(kMomentumPrefix + p.name, p.shape, momentum.data() + p.offset, p.count));
  }
  for (const auto& [name, values] : info.exchange_state) {
    tensors.push_back(F32Tensor(std::string(kExchangePrefix) + name, {static_cast<int64_t>(values.size())},
                                values.data(), values.size()));
  }
  const LossScalerState scaler = trainer.loss_scaler().state();
  std::map<std::string, std::string> metadata = {
      {kCheckpointKey, kCheckpointVersion},
      {"model", model.name()},
      {"precision", std::string(PrecisionName(model.precision()))},
      {"optimizer", std::string(OptimizerKindName(trainer.optimizer().options().kind))},
      {"step", std::to_string(info.step)},
      {"epoch", std::to_string(info.epoch)},
      {"epoch_batches", std::to_string(info.epoch_batches)},
      {"loss_scale", DoubleToString(scaler.scale)},
      {"clean_steps", std::to_string(scaler.clean_steps)},
      {"skipped_steps", std::to_string(scaler.skipped_steps)},
  };
  if (!info.data_order.empty()) {
    metadata["data_order"] = info.data_order;
    metadata["partition_batches"] = std::to_string(info.partition_batches);
  }
  if (!info.sample_counts.empty()) metadata["sample_counts"] = info.sample_counts;
  if (info.schedule_steps_per_epoch > 0) {
    metadata["schedule_steps_per_epoch"] = std::to_string(info.schedule_steps_per_epoch);
    metadata["global_batch"] = std::to_string(info.global_batch);
  }
  return EncodeSafetensors("checkpoint", tensors, metadata);
}

namespace {

// Where the checkpoint stands (step, epoch, data order, schedule, sample
// counter), from its metadata; fields that older builds did not write stay 0
// or empty.
Result<CheckpointInfo> ReadPosition(const SafetensorsFile& file, const std::string& path) {
  CheckpointInfo info;
  CHORUS_ASSIGN_OR_RETURN(info.step, GetMetaNumber<int64_t>(file, path, "step"));
  CHORUS_ASSIGN_OR_RETURN(info.epoch, GetMetaNumber<int64_t>(file, path, "epoch"));
  if (file.metadata.count("epoch_batches")) {
    CHORUS_ASSIGN_OR_RETURN(info.epoch_batches, GetMetaNumber<int64_t>(file, path, "epoch_batches"));
  }
  if (auto order = file.metadata.find("data_order"); order != file.metadata.end()) {
    info.data_order = order->second;
    CHORUS_ASSIGN_OR_RETURN(info.partition_batches, GetMetaNumber<int64_t>(file, path, "partition_batches"));
  }
  if (file.metadata.count("schedule_steps_per_epoch")) {
    CHORUS_ASSIGN_OR_RETURN(info.schedule_steps_per_epoch,
                            GetMetaNumber<int64_t>(file, path, "schedule_steps_per_epoch"));
    CHORUS_ASSIGN_OR_RETURN(info.global_batch, GetMetaNumber<int64_t>(file, path, "global_batch"));
  }
  if (auto counts = file.metadata.find("sample_counts"); counts != file.metadata.end()) {
    info.sample_counts = counts->second;
  }
  return info;
}

}  // namespace

Result<CheckpointInfo> ReadCheckpointPosition(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
  CHORUS_ASSIGN_OR_RETURN(SafetensorsFile file, DecodeSafetensors(bytes, path));
  if (!file.metadata.count(kCheckpointKey)) {
    return Err(InvalidArgument(path + ": not a Chorus checkpoint (no '" + std::string(kCheckpointKey) + "' metadata)"));
  }
  return ReadPosition(file, path);
}

Result<CheckpointInfo> LoadCheckpoint(const std::string& path, Trainer* trainer) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
  return RestoreCheckpoint(bytes, path, trainer);
}

Result<CheckpointInfo> RestoreCheckpoint(std::span<const uint8_t> bytes, const std::string& path, Trainer* trainer) {
  CHORUS_ASSIGN_OR_RETURN(SafetensorsFile file, DecodeSafetensors(bytes, path));
  Model& model = trainer->model();
  auto marker = file.metadata.find(kCheckpointKey);
  if (marker == file.metadata.end()) {
    return Err(InvalidArgument(path + ": not a Chorus checkpoint (no '" +
                               std::string(kCheckpointKey) + "' metadata; an exported model "
                               "loads with LoadModelWeights)"));
  }
  if (marker->second != kCheckpointVersion) {
    return Err(FailedPrecondition(path + ": checkpoint version " + marker->second +
                                  ", this build reads " + kCheckpointVersion));
  }
  CHORUS_ASSIGN_OR_RETURN(std::string model_name, GetMeta(file, path, "model"));
  if (model_name != model.name()) {
    return Err(InvalidArgument(path + ": checkpoint is for model '" + model_name +
                               "', the trainer runs '" + model.name() + "'"));
  }
  CHORUS_ASSIGN_OR_RETURN(std::string optimizer, GetMeta(file, path, "optimizer"));
  const std::string_view own_optimizer = OptimizerKindName(trainer->optimizer().options().kind);
  if (optimizer != own_optimizer) {
    return Err(InvalidArgument(path + ": checkpoint momentum is for optimizer '" + optimizer +
                               "', the trainer uses '" + std::string(own_optimizer) + "'"));
  }
  CHORUS_ASSIGN_OR_RETURN(std::string precision, GetMeta(file, path, "precision"));
  CHORUS_ASSIGN_OR_RETURN(CheckpointInfo info, ReadPosition(file, path));
  LossScalerState scaler;
  CHORUS_ASSIGN_OR_RETURN(scaler.scale, GetMetaNumber<double>(file, path, "loss_scale"));
  CHORUS_ASSIGN_OR_RETURN(scaler.clean_steps, GetMetaNumber<int64_t>(file, path, "clean_steps"));
  CHORUS_ASSIGN_OR_RETURN(scaler.skipped_steps,
                          GetMetaNumber<int64_t>(file, path, "skipped_steps"));
  if (info.step < 0 || info.epoch < 0 || info.epoch_batches < 0 || info.epoch_batches > info.step ||
      info.partition_batches < 0 || info.partition_batches > info.epoch_batches ||
      info.schedule_steps_per_epoch < 0 || info.global_batch < 0 ||
      (info.schedule_steps_per_epoch > 0) != (info.global_batch > 0)) {
    return Err(DataLoss(path + ": step " + std::to_string(info.step) + ", epoch " + std::to_string(info.epoch) +
                        ", epoch_batches " + std::to_string(info.epoch_batches) +
                        ", partition_batches " + std::to_string(info.partition_batches) + ", schedule " +
                        std::to_string(info.schedule_steps_per_epoch) + " steps per epoch, global batch " +
                        std::to_string(info.global_batch) +
                        " in checkpoint metadata (none may be negative; epoch_batches at most step, "
                        "partition_batches at most epoch_batches)"));
  }
  if (precision != PrecisionName(model.precision())) {
    CHORUS_LOG_WARN(Subsys::kTrainer, path, ": checkpoint trained in ", precision,
                    ", resuming in ", PrecisionName(model.precision()),
                    " with the initial loss scale");
    scaler.scale = trainer->loss_scaler().scale();
  }

  CHORUS_ASSIGN_OR_RETURN(WeightPlan plan, PlanWeights(file, path, model));
  std::vector<const NamedTensor*> momentum;
  for (const ParameterInfo& p : model.parameters()) {
    const std::string name = kMomentumPrefix + p.name;
    CHORUS_ASSIGN_OR_RETURN(const NamedTensor* t, FindTensor(file, path, name, "F32", p.shape));
    momentum.push_back(t);
    plan.consumed.insert(name);
  }
  for (const NamedTensor& t : file.tensors) {
    if (!t.name.starts_with(kExchangePrefix)) continue;
    if (t.dtype != "F32" || t.shape.size() != 1 || t.bytes.size() != static_cast<size_t>(t.shape[0]) * sizeof(float)) {
      return Err(DataLoss(path + ": exchange tensor '" + t.name + "' is not a vector of F32 (dtype " + t.dtype +
                          ", shape " + ShapeToString(t.shape) + ")"));
    }
    std::vector<float>& values = info.exchange_state[t.name.substr(kExchangePrefix.size())];
    values.resize(static_cast<size_t>(t.shape[0]));
    std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
    plan.consumed.insert(t.name);
  }
  CHORUS_RETURN_IF_ERROR(CheckNoUnexpected(file, path, plan.consumed, false));
  // Validate the scaler state before changing anything.
  LossScaler probe = trainer->loss_scaler();
  Status restored = probe.Restore(scaler);
  if (!restored.ok()) return Err(restored.WithContext(path));

  ApplyWeights(plan, &model);
  const std::span<float> momentum_buffer = trainer->optimizer().momentum();
  for (size_t i = 0; i < momentum.size(); ++i) {
    std::memcpy(momentum_buffer.data() + model.parameters()[i].offset, momentum[i]->bytes.data(),
                momentum[i]->bytes.size());
  }
  trainer->loss_scaler() = probe;
  CHORUS_RETURN_IF_ERROR(trainer->SyncToDevice());
  return info;
}

Status ExportModel(const Trainer& trainer, const std::string& path) {
  CHORUS_RETURN_IF_ERROR(trainer.SyncToHost());
  const std::vector<NamedTensor> tensors = StateDictTensors(trainer.model());
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"model", trainer.model().name()},
  };
  Status status = WriteSafetensors(path, tensors, metadata);
  if (!status.ok()) return status.WithContext("exporting model");
  return Status::Ok();
}

Status LoadModelWeights(const std::string& path, Trainer* trainer) {
  CHORUS_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  auto model_name = file.metadata.find("model");
  if (model_name != file.metadata.end() && model_name->second != trainer->model().name()) {
    return InvalidArgument(path + ": file is for model '" + model_name->second +
                           "', the trainer runs '" + trainer->model().name() + "'");
  }
  CHORUS_ASSIGN_OR_RETURN(WeightPlan plan, PlanWeights(file, path, trainer->model()));
  CHORUS_RETURN_IF_ERROR(CheckNoUnexpected(file, path, plan.consumed, true));
  ApplyWeights(plan, &trainer->model());
  return trainer->SyncToDevice();
}

}  // namespace chorus::trainer
