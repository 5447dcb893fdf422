// Dynamic loss scaler state machine (see loss_scaler.h). No gradients, no weights.
#include "trainer/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace chorus::trainer {

Status ValidateLossScalerOptions(const LossScalerOptions& o) {
  auto bad = [](const std::string& what) {
    return InvalidArgument("loss scaler option " + what);
  };
  if (!(o.min_scale > 0) || !std::isfinite(o.min_scale)) {
    return bad("min_scale must be positive and finite, got " + std::to_string(o.min_scale));
  }
  if (!(o.max_scale >= o.min_scale) || !std::isfinite(o.max_scale)) {
    return bad("max_scale must be finite and >= min_scale, got " + std::to_string(o.max_scale));
  }
  if (!(o.initial_scale >= o.min_scale && o.initial_scale <= o.max_scale)) {
    return bad("initial_scale must be in [min_scale, max_scale], got " +
               std::to_string(o.initial_scale));
  }
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor)) {
    return bad("growth_factor must be > 1, got " + std::to_string(o.growth_factor));
  }
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0)) {
    return bad("backoff_factor must be in (0, 1), got " + std::to_string(o.backoff_factor));
  }
  if (o.growth_interval < 1) {
    return bad("growth_interval must be >= 1, got " + std::to_string(o.growth_interval));
  }
  return Status::Ok();
}

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  state_.scale = options_.enabled ? options_.initial_scale : 1.0;
}

bool LossScaler::Update(bool gradients_finite) {
  if (!gradients_finite) {
    ++state_.skipped_steps;
    state_.clean_steps = 0;
    if (options_.enabled) {
      state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
    }
    return false;
  }
  ++state_.clean_steps;
  if (options_.enabled && state_.clean_steps >= options_.growth_interval) {
    state_.scale = std::min(state_.scale * options_.growth_factor, options_.max_scale);
    state_.clean_steps = 0;
  }
  return true;
}

Status LossScaler::Restore(const LossScalerState& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale)) {
    return InvalidArgument("loss scaler state: scale must be positive and finite, got " +
                           std::to_string(state.scale));
  }
  if (state.clean_steps < 0 || state.skipped_steps < 0) {
    return InvalidArgument("loss scaler state: negative step counters");
  }
  if (!options_.enabled && state.scale != 1.0) {
    return InvalidArgument("loss scaler state: scale " + std::to_string(state.scale) +
                           " for a disabled scaler (FP32 training uses 1)");
  }
  state_ = state;
  return Status::Ok();
}

}  // namespace chorus::trainer
