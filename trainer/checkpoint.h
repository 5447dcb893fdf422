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
#include <map>
#include <span>
#include <string>
#include <vector>

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
  // The epoch's data order (BatchSampler::History: its partitions over the
  // memberships of the epoch); empty: one partition over the run's own
  // membership (and in older checkpoints).
  std::string data_order;
  // Batches of the last partition of data_order already trained (the rest of
  // epoch_batches came before it). Meaningful only with data_order.
  int64_t partition_batches = 0;
  // The schedule's unit and scale (Trainer::SetSchedule); 0 in checkpoints of
  // older builds: the node's own.
  int64_t schedule_steps_per_epoch = 0;
  int64_t global_batch = 0;
  // What the node's exchange keeps beside the model (an outer optimizer's
  // outer parameters and velocity), by name: saved as F32 vectors named
  // "exchange.<name>" and restored as they are; the exchange checks them.
  std::map<std::string, std::vector<float>> exchange_state;
  // The cluster's trained-sample counter as its owner encodes it (node/ keeps
  // one per node incarnation); stored and returned as it is. Empty: none
  // (a single node, a lock-step run, or a checkpoint of an older build).
  std::string sample_counts;
};

[[nodiscard]] Status SaveCheckpoint(const Trainer& trainer, const CheckpointInfo& info,
                                    const std::string& path);

// Restores weights, buffers, momentum and loss-scaler state into `trainer`
// (which must have been created with the same model and optimizer) and
// refreshes the FP16 working copy. A checkpoint of the other precision loads
// (the master is FP32 either way) with the trainer's own initial loss scale.
[[nodiscard]] Result<CheckpointInfo> LoadCheckpoint(const std::string& path, Trainer* trainer);

// Where the checkpoint at `path` stands (its CheckpointInfo without the
// exchange state), read from its metadata without a trainer.
[[nodiscard]] Result<CheckpointInfo> ReadCheckpointPosition(const std::string& path);

// The same as bytes in memory: what a member sends a node that joins a running
// cluster (live state), restored with the same checks; `what` names the bytes
// in errors ("live state from node0").
[[nodiscard]] Result<std::vector<uint8_t>> CheckpointBytes(const Trainer& trainer, const CheckpointInfo& info);
[[nodiscard]] Result<CheckpointInfo> RestoreCheckpoint(std::span<const uint8_t> bytes, const std::string& what,
                                                       Trainer* trainer);

// Parameters and buffers only, with metadata {"format": "pt", "model": name}.
[[nodiscard]] Status ExportModel(const Trainer& trainer, const std::string& path);

// Loads parameters and buffers (from an exported model or a checkpoint; other
// checkpoint tensors are ignored) and refreshes the working copy.
[[nodiscard]] Status LoadModelWeights(const std::string& path, Trainer* trainer);

}  // namespace chorus::trainer
