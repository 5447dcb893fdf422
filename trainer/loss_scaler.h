// Dynamic loss scaling for FP16 training (Micikevicius et al. 2018; PyTorch's
// GradScaler): the loss gradient is multiplied by `scale` so that small
// gradients survive FP16; after backward the caller checks the (unscaled) FP32
// gradients for Inf/NaN and reports it here.
//
//   finite step:  clean_steps += 1; when clean_steps reaches growth_interval,
//                 scale = min(scale * growth_factor, max_scale), clean_steps = 0.
//   overflow:     the step is skipped (Update returns false), skipped_steps += 1,
//                 scale = max(scale * backoff_factor, min_scale), clean_steps = 0.
//
// Disabled (FP32 training): scale stays 1 and never changes, but a non-finite
// gradient still skips the step and is counted. Pure state machine: it never
// looks at gradients itself and never touches weights.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace chorus::trainer {

struct LossScalerOptions {
  bool enabled = true;            // false: FP32 training, scale fixed at 1
  double initial_scale = 65536.0; // 2^16, as PyTorch's GradScaler
  int growth_interval = 2000;     // consecutive finite steps before the scale grows
  double growth_factor = 2.0;     // > 1
  double backoff_factor = 0.5;    // in (0, 1)
  double min_scale = 1.0;         // backoff never goes below this
  double max_scale = 16777216.0;  // 2^24: growth stops here (keeps scale * grad finite in FP32)
};

// Checks ranges: initial in [min, max], min > 0, growth_factor > 1, backoff in
// (0, 1), growth_interval >= 1. Errors name the field.
[[nodiscard]] Status ValidateLossScalerOptions(const LossScalerOptions& options);

// What a checkpoint must carry to resume the scaler bitwise.
struct LossScalerState {
  double scale = 1.0;
  int64_t clean_steps = 0;
  int64_t skipped_steps = 0;
};

class LossScaler {
 public:
  // `options` must have passed ValidateLossScalerOptions.
  explicit LossScaler(const LossScalerOptions& options);

  // The factor to multiply the loss gradient by (1 when disabled).
  double scale() const { return state_.scale; }
  // Finite steps since the last growth or backoff.
  int64_t clean_steps() const { return state_.clean_steps; }
  // Steps skipped because of Inf/NaN gradients, since construction (or restore).
  int64_t skipped_steps() const { return state_.skipped_steps; }
  bool enabled() const { return options_.enabled; }

  // Records one step's outcome; returns true when the optimizer should apply it.
  bool Update(bool gradients_finite);

  LossScalerState state() const { return state_; }
  // Restores a saved state; the scale must be positive and finite, counters >= 0.
  [[nodiscard]] Status Restore(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace chorus::trainer
