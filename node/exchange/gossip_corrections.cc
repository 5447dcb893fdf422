// Gossip corrections (see gossip_corrections.h).
#include "node/exchange/gossip_corrections.h"

#include <cmath>

#include "kernels/vector_clones.h"

namespace chorus::node {
namespace {

// momentum = mu vhat + k (x - master), each element in double and rounded once.
CHORUS_VECTOR_CLONES void QuasiGlobalMomentum(size_t n, double mu, double k, const float* vhat, const float* x,
                                              const float* master, float* momentum) {
  for (size_t i = 0; i < n; ++i) {
    momentum[i] = static_cast<float>(mu * vhat[i] + k * (static_cast<double>(x[i]) - master[i]));
  }
}

}  // namespace

void GossipCorrections::BeforeUpdate(int64_t step, std::span<const float> master, std::span<const float> momentum) {
  if (!active()) return;
  x_.assign(master.begin(), master.end());
  if (options_.quasi_global_momentum) vhat_.assign(momentum.begin(), momentum.end());
  snapshot_step_ = step;
}

void GossipCorrections::BeforeMix(int64_t step, std::span<float> master, std::span<const float> momentum) {
  if (!active() || snapshot_step_ != step || x_.size() != master.size()) return;
  scale_ = 1.0;
  if (options_.quasi_global_momentum && !options_.momentum_holds_lr && momentum.size() == master.size()) {
    // SGD: the optimizer moved x_t by lr v_t; lr from the move itself.
    double sv = 0.0, vv = 0.0;
    for (size_t i = 0; i < master.size(); ++i) {
      const double s = static_cast<double>(x_[i]) - master[i];
      sv += s * momentum[i];
      vv += static_cast<double>(momentum[i]) * momentum[i];
    }
    scale_ = vv > 0.0 ? sv / vv : 0.0;
  }
  if (!options_.d2) return;
  const bool have_previous = output_step_ == step - 1 && output_.size() == master.size();
  if (!have_previous) {
    output_.assign(master.begin(), master.end());
  } else {
    for (size_t i = 0; i < master.size(); ++i) {
      const float o = master[i];
      master[i] = x_[i] + (o - output_[i]);
      output_[i] = o;
    }
  }
  output_step_ = step;
}

void GossipCorrections::AfterMix(int64_t step, std::span<const float> master, std::span<float> momentum) {
  if (!options_.quasi_global_momentum || snapshot_step_ != step || vhat_.size() != momentum.size() ||
      x_.size() != master.size()) {
    return;
  }
  // A step whose lr is 0 (or whose move cannot be read) keeps the optimizer's buffer.
  if (!(scale_ > 1e-12) || !std::isfinite(scale_)) return;
  const double mu = options_.momentum;
  QuasiGlobalMomentum(momentum.size(), mu, (1.0 - mu) / scale_, vhat_.data(), x_.data(), master.data(),
                      momentum.data());
  last_scale_ = scale_;
}

void GossipCorrections::Reset() {
  snapshot_step_ = -1;
  output_step_ = -1;
  x_.clear();
  vhat_.clear();
  output_.clear();
}

}  // namespace chorus::node
