// The learning-rate schedule (see lr_schedule.h). Pure functions only.
#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace chorus::trainer {

Status ValidateLrScheduleOptions(const LrScheduleOptions& o) {
  if (!(o.base_lr >= 0.0) || !std::isfinite(o.base_lr)) {
    return InvalidArgument("lr schedule: base_lr must be >= 0, got " + std::to_string(o.base_lr));
  }
  if (o.global_batch < 1) {
    return InvalidArgument("lr schedule: global_batch must be >= 1, got " +
                           std::to_string(o.global_batch));
  }
  if (!(o.warmup_epochs >= 0.0) || !std::isfinite(o.warmup_epochs)) {
    return InvalidArgument("lr schedule: warmup_epochs must be >= 0, got " +
                           std::to_string(o.warmup_epochs));
  }
  if (!(o.power >= 0.0) || !std::isfinite(o.power)) {
    return InvalidArgument("lr schedule: power must be >= 0, got " + std::to_string(o.power));
  }
  return Status::Ok();
}

double PeakLearningRate(const LrScheduleOptions& o) {
  return o.base_lr * static_cast<double>(o.global_batch) / 256.0;
}

double LearningRate(double step, int64_t steps_per_epoch, int total_epochs,
                    const LrScheduleOptions& o) {
  if (steps_per_epoch < 1 || total_epochs < 1 || !(step >= 0.0)) return 0.0;
  const int64_t total = steps_per_epoch * total_epochs;
  if (step >= static_cast<double>(total)) return 0.0;
  const double peak = PeakLearningRate(o);
  const int64_t warmup = std::min<int64_t>(
      total, static_cast<int64_t>(std::llround(o.warmup_epochs * steps_per_epoch)));
  if (step < static_cast<double>(warmup)) {
    return peak * (step + 1.0) / static_cast<double>(warmup);
  }
  const double progress = (step - static_cast<double>(warmup)) / static_cast<double>(total - warmup);
  return peak * std::pow(1.0 - progress, o.power);
}

}  // namespace chorus::trainer
