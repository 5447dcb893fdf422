// Optimizers that update the FP32 master weights in place: LARS (layer-wise
// adaptive rate scaling, You et al. 2017; Jia et al. 2018) and SGD with
// momentum. Both keep one FP32 momentum buffer laid out like the master buffer.
//
// LARS, per weight tensor (kind kWeight), with w, g, v that tensor's slices:
//   local_lr = eta * ||w|| / (||g|| + wd * ||w||)
//   v = momentum * v + lr * local_lr * (g + wd * w);   w -= v
// If ||w|| == 0 or ||g|| == 0 the ratio is meaningless (0 or 0/0), so
// local_lr = 1 (as in NVIDIA's and PyTorch-LARS implementations). Biases and
// BatchNorm parameters get neither weight decay nor the trust ratio:
//   v = momentum * v + lr * g;   w -= v
//
// SGD (PyTorch's torch.optim.SGD with momentum, dampening 0):
//   v = momentum * v + (g + wd * w)    (wd only on kWeight tensors);   w -= lr * v
//
// Norms are accumulated in double in a fixed order (deterministic for any thread
// count). The optimizer never checks for Inf/NaN (the loss scaler decides
// whether a step happens) and never touches the FP16 working copy.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/choices.h"
#include "trainer/parameter.h"

namespace chorus::trainer {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kLars;
  double momentum = 0.9;       // in [0, 1)
  double weight_decay = 5e-4;  // >= 0; weights (kind kWeight) only
  double eta = 0.001;          // LARS trust coefficient (> 0); unused by SGD
};

[[nodiscard]] Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  // `table` describes the buffers Step() will get; momentum starts at zero.
  static Result<std::unique_ptr<Optimizer>> Create(const OptimizerOptions& options,
                                                   std::vector<ParameterInfo> table);

  // Called with (offset, count) of each updated range of the master, right after
  // it was written (ranges of at most kUpdateChunk floats), so the caller can
  // derive the FP16 working copy while the range is in cache. Ranges are
  // updated in parallel on the kernels' threads: the callback runs
  // concurrently for disjoint ranges, in no fixed order.
  using UpdatedFn = std::function<void(size_t offset, size_t count)>;
  static constexpr size_t kUpdateChunk = 4096;

  // One pass over the gradients (and, for LARS, the weights) of the next Step:
  // the squared norms it needs, per chunk in double. Returns whether every
  // gradient is finite (a sum of float squares in double is finite exactly
  // when every term is), so the caller needs no separate Inf/NaN scan.
  bool Prepare(std::span<const float> master, std::span<const float> gradients);

  // One update of `master` from `gradients` (both laid out as the table) at
  // learning rate `lr`. Sizes must equal the table's total. Uses the norms of
  // the last Prepare (the buffers must be unchanged since), or runs it first.
  void Step(std::span<float> master, std::span<const float> gradients, double lr,
            const UpdatedFn& on_updated = {});

  // LARS local_lr of each parameter from the last Step (1 for excluded kinds
  // and for SGD); for logging and tests.
  std::span<const double> last_local_lr() const { return last_local_lr_; }

  // The momentum buffer (same layout as the master); checkpoints read and restore it.
  std::span<float> momentum() { return momentum_; }
  std::span<const float> momentum() const { return momentum_; }
  const OptimizerOptions& options() const { return options_; }

 private:
  Optimizer(const OptimizerOptions& options, std::vector<ParameterInfo> table, size_t total);

  // One kUpdateChunk range of one tensor: the unit of parallel work.
  struct Chunk {
    size_t param;   // index into table_
    size_t offset;  // into the flat buffers
    size_t count;
  };

  OptimizerOptions options_;
  std::vector<ParameterInfo> table_;
  std::vector<float> momentum_;
  std::vector<double> last_local_lr_;
  std::vector<Chunk> chunks_;              // every tensor's ranges, in table order
  std::vector<double> chunk_w_sq_, chunk_g_sq_;  // squared norms per chunk (Prepare)
  bool prepared_ = false;                        // Prepare ran since the last Step
  std::vector<float> coeff_, decay_;       // per tensor, for the current Step
};

}  // namespace chorus::trainer
