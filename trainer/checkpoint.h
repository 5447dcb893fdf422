// Checkpoints and the exported model, as safetensors files (trainer/safetensors.h).
//
// A checkpoint holds everything needed to resume training bitwise: the FP32
// master weights by parameter name ("fc1.weight"), the BatchNorm buffers
// ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked" as I64),
// the optimizer momentum ("momentum.fc1.weight"), and metadata: step, epoch,
// batches into that epoch, loss scale, clean-step count, skipped steps,
// model, precision, optimizer.
// The exported model holds only the parameters and buffers, named as PyTorch's
// state_dict, so `model.load_state_dict(safetensors.torch.load_file(path))`
// works on the equivalent nn.Module.
//
// Loading validates everything (model name, optimizer, every tensor's presence,
// dtype and shape, no unexpected tensors) before it changes any state; errors
// name the path and the tensor or key. Must not choose paths or schedules (the
// node does); files are written atomically by WriteSafetensors.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "trainer/trainer.h"

namespace chorus::trainer {

// Where training stands when the checkpoint is taken.
struct CheckpointInfo {
  int64_t step = 0;   // steps completed = the index of the next step to run
  int64_t epoch = 0;  // epochs completed
  // Batches of epoch `epoch` already trained: a checkpoint taken mid-epoch (a
  // node stopped by a signal). 0 at an epoch's end, and in older checkpoints.
  int64_t epoch_batches = 0;
};

[[nodiscard]] Status SaveCheckpoint(const Trainer& trainer, const CheckpointInfo& info,
                                    const std::string& path);

// Restores weights, buffers, momentum and loss-scaler state into `trainer`
// (which must have been created with the same model and optimizer) and
// refreshes the FP16 working copy. A checkpoint of the other precision loads
// (the master is FP32 either way) with the trainer's own initial loss scale.
[[nodiscard]] Result<CheckpointInfo> LoadCheckpoint(const std::string& path, Trainer* trainer);

// Parameters and buffers only, with metadata {"format": "pt", "model": name}.
[[nodiscard]] Status ExportModel(const Trainer& trainer, const std::string& path);

// Loads parameters and buffers (from an exported model or a checkpoint; other
// checkpoint tensors are ignored) and refreshes the working copy.
[[nodiscard]] Status LoadModelWeights(const std::string& path, Trainer* trainer);

}  // namespace chorus::trainer
