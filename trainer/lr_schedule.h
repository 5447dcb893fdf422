// Learning-rate schedule: linear scaling with the global batch (Goyal et al.
// 2017), linear warm-up, then polynomial decay (as in LARS papers).
//
//   peak    = base_lr * global_batch / 256
//   W       = round(warmup_epochs * steps_per_epoch)      warm-up steps
//   T       = total_epochs * steps_per_epoch              total steps
//   step < W:      lr = peak * (step + 1) / W             (starts near 0, reaches peak)
//   W <= step < T: lr = peak * (1 - (step - W) / (T - W))^power
//   step >= T:     lr = 0
// So lr is peak at the first step after warm-up and would reach exactly 0 at
// step T, one past the last step; the last step T-1 gets peak / (T - W)^power.
// When W >= T the whole run is warm-up. A pure function: no state, no clock.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace chorus::trainer {

struct LrScheduleOptions {
  double base_lr = 0.1;        // lr for a global batch of 256
  int global_batch = 256;      // sum of all nodes' batches
  double warmup_epochs = 1.0;  // >= 0; 0 disables warm-up
  double power = 2.0;          // polynomial decay power (>= 0; 0 keeps the peak)
};

[[nodiscard]] Status ValidateLrScheduleOptions(const LrScheduleOptions& options);

// Peak learning rate after linear scaling.
double PeakLearningRate(const LrScheduleOptions& options);

// Learning rate of 0-based `step`, a position on the schedule: a whole step,
// or a fraction of one where an epoch of a changed membership holds another
// number of steps than the schedule's (the node maps its place in such an
// epoch onto steps_per_epoch). steps_per_epoch >= 1 and total_epochs >= 1
// (a non-positive value gives lr 0).
double LearningRate(double step, int64_t steps_per_epoch, int total_epochs,
                    const LrScheduleOptions& options);

}  // namespace chorus::trainer
