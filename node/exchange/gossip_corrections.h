// Corrections to a gossip step that keep decentralized training closer to
// what an all-reduce would train, all on the node's own vectors:
//
// Quasi-global momentum (Lin et al., ICML 2021, "Quasi-Global Momentum:
// Accelerating Decentralized Deep Learning on Heterogeneous Data"). Local
// momentum on a sparse graph remembers only the node's own gradients, which
// drift from the others' on unlike data. QGM keeps the heavy-ball step but
// rebuilds the buffer from the move the model actually made, mixing included:
//   v_t   = mu * vhat_{t-1} + lr (g_t + ...)    (the optimizer, unchanged)
//   x_{t+1} = Mix(x_t - v_t)
//   vhat_t = mu * vhat_{t-1} + (1 - mu) * (x_t - x_{t+1}) / c
// where c converts a move into the buffer's units: 1 where the buffer holds
// lr already (LARS, Chorus's default: w -= v), lr where it does not (SGD:
// w -= lr v; c is read off the step as <x_t - x_half, v_t> / <v_t, v_t>).
//
// D^2 (Tang et al., ICML 2018, "D^2: Decentralized Training over
// Decentralized Data"): the variance of the nodes' data (their gradients'
// difference) is cancelled by mixing
//   x_{t+1/2} = 2 x_t - x_{t-1} - lr g_t + lr g_{t-1}
// which, with o_t = x_t - lr g_t the optimizer's output of step t, is
//   x_{t+1/2} = x_t + o_t - o_{t-1}
// so the optimizer runs unchanged and only its last output is kept. The first
// step after a (re)start has no o_{t-1} and is a plain D-PSGD step. It needs
// a symmetric doubly stochastic mixing matrix (D-PSGD's) and mixing every step.
//
// Must not: communicate, or keep state across a step that skipped a hook (a
// step whose snapshot is missing runs uncorrected).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace chorus::node {

class GossipCorrections {
 public:
  struct Options {
    bool quasi_global_momentum = false;
    double momentum = 0.9;        // the optimizer's mu
    bool momentum_holds_lr = true;  // LARS: w -= v; SGD: w -= lr v
    bool d2 = false;
  };
  explicit GossipCorrections(Options options) : options_(options) {}
  bool active() const { return options_.quasi_global_momentum || options_.d2; }

  // Before the optimizer's update of `step`: x_t and vhat_{t-1}.
  void BeforeUpdate(int64_t step, std::span<const float> master, std::span<const float> momentum);
  // After it, before mixing: `master` holds o_t; with D^2 it becomes
  // x_t + o_t - o_{t-1} (o_{t-1} from step - 1, else unchanged). Keeps o_t
  // and, for QGM's c, the optimizer's move.
  void BeforeMix(int64_t step, std::span<float> master, std::span<const float> momentum);
  // After mixing: with QGM, `momentum` becomes vhat_t from the mixed `master`.
  void AfterMix(int64_t step, std::span<const float> master, std::span<float> momentum);
  // Forgets every snapshot (a re-form or a state taken from another node).
  void Reset();

  // c of the last QGM update (1 for a buffer that holds lr).
  double last_scale() const { return last_scale_; }

 private:
  Options options_;
  int64_t snapshot_step_ = -1;   // the step x_t and vhat were taken for
  std::vector<float> x_;         // x_t
  std::vector<float> vhat_;      // vhat_{t-1}
  int64_t output_step_ = -1;     // the step o_ belongs to
  std::vector<float> output_;    // o_{t-1}, then o_t
  double scale_ = 1.0;           // c of this step
  double last_scale_ = 1.0;
};

}  // namespace chorus::node
