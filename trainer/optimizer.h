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
// The gradient norm of a node that trains alone between exchanges (gossip,
// local steps) is its own batch b's, larger than the norm of the global batch
// B's mean gradient that an all-reduce node sees: the noise of a mean of b
// samples is sqrt(B / b) times that of B samples. Its trust ratio then
// shrinks by up to that factor (4x at 16 nodes), and so does its step. With
// `norm_batch_ratio` = b / B < 1 each tensor's ||g||^2 is replaced by an
// estimate of the global batch's: the product of successive gradients
// <g_t, g_{t-1}> estimates ||E g||^2 (their noise is independent), the square
// ||g_t||^2 is ||E g||^2 plus the noise of b samples, so
//   ||g_B||^2 ~= D + (S - D) b / B,   D = EMA <g_t, g_{t-1}>, S = EMA ||g_t||^2
// (EMAs with a factor 0.9, debiased; D clamped to [0, S]). The first step,
// with no predecessor, uses the local norm. At a large lr successive
// gradients point against each other along the sharp directions, so that D
// comes out small (biased, not noisy: docs/performance.md). With
// `peer_products` D is instead the EMA of <g_i, g_j>, this node's gradient
// with another node's of the same step, from independent samples at (nearly)
// the same point (SetPeerProducts: a sketch sent along the gossip graph's
// edges); a step without products uses the local norm.
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
  // LARS: b / B, this node's batch over the global batch whose gradient norm
  // the trust ratio should see (see above); 1: the local gradient's own.
  double norm_batch_ratio = 1.0;
  // LARS with norm_batch_ratio < 1: the products come from SetPeerProducts,
  // not from successive gradients (see above).
  bool peer_products = false;
  // LARS: an exchange gives the members' mean gradient's norm each step
  // (SetMeanSquares); what the optimizer does with it does not depend on this
  // flag, which tells the exchange to (train.lars_norm = "mean-sketch").
  bool mean_squares = false;
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

  // norm_batch_ratio after a change of the global batch (a member joined or left).
  void SetNormBatchRatio(double ratio) { options_.norm_batch_ratio = ratio; }
  // LARS with norm_batch_ratio < 1: each tensor's estimated global-batch
  // gradient norm over its local one, from the last Step (1 otherwise).
  std::span<const double> last_norm_ratio() const { return last_norm_ratio_; }

  // peer_products: each tensor's <g, g_peer> for the next Step (in table
  // order; excluded kinds' entries unused), from peers' gradients of the
  // same step. Used by that Step only; another size is ignored.
  void SetPeerProducts(std::vector<double> products) { peer_products_ = std::move(products); }
  // Each tensor's estimated squared norm of the members' mean gradient (of a
  // recent step: node/exchange/mean_sketch.h), for the next Step: LARS's
  // trust ratio takes its root in place of the node's own norm, an
  // all-reduce node's norm. Not below `floor` times the node's own square
  // (its batch over the global batch: the mean of independent noise), so
  // that members who cancel one another cannot make a step much larger.
  // Used by that Step only; another size is ignored.
  void SetMeanSquares(std::vector<double> squares, double floor) {
    mean_squares_ = std::move(squares);
    mean_squares_floor_ = floor;
  }

  // Where every member's gradient can be seen (`chorus simulate
  // --exact-lars-norm`, whose nodes share a process): returns the members'
  // mean gradient of this step (empty where it is not known), from which
  // LARS's trust ratio then takes each tensor's norm, as an all-reduce node's
  // does. Every member calls it once a step, with an empty gradient on a step
  // the loss scaler skips (SkipStep), so that all call it alike.
  using MeanGradientFn = std::function<std::span<const float>(std::span<const float> gradient)>;
  void SetMeanGradient(MeanGradientFn mean_gradient) { mean_gradient_ = std::move(mean_gradient); }
  // A step the loss scaler skipped: MeanGradientFn's call without a gradient.
  // The peer products given for it are dropped.
  void SkipStep() {
    peer_products_.clear();
    mean_squares_.clear();
    if (mean_gradient_) mean_gradient_({});
  }

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
  // Global-batch norm estimate (norm_batch_ratio < 1): the previous gradient,
  // <g, g_prev> per chunk, and per tensor the EMAs of <g_t, g_{t-1}> and
  // ||g_t||^2 and the steps they hold.
  std::vector<float> previous_gradient_;
  std::vector<double> chunk_g_dot_;
  std::vector<double> ema_dot_, ema_sq_;
  std::vector<double> peer_products_;  // for the next Step (SetPeerProducts)
  std::vector<double> mean_squares_;   // for the next Step (SetMeanSquares)
  double mean_squares_floor_ = 0.0;
  int64_t ema_steps_ = 0;
  bool have_previous_ = false;
  std::vector<double> last_norm_ratio_;
  MeanGradientFn mean_gradient_;
  bool prepared_ = false;                        // Prepare ran since the last Step
  std::vector<float> coeff_, decay_;       // per tensor, for the current Step
};

}  // namespace chorus::trainer
