// FirstBucketTuner (see first_bucket_tuner.h).
#include "node/exchange/first_bucket_tuner.h"

#include <algorithm>

#include "common/clock.h"
#include "common/quantile.h"

namespace chorus::node {
namespace {

double MedianOf(std::vector<double> v) { return Quantile(v, 0.5); }

}  // namespace

void FirstBucketTuner::Start(std::span<const gossip::ParamSlice> slices, size_t element_bytes) {
  *this = FirstBucketTuner();
  size_t bytes = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    bytes += slices[i].count * element_bytes;
    const bool group_ends = i + 1 == slices.size() || slices[i].group < 0 || slices[i + 1].group != slices[i].group;
    if (!group_ends) continue;
    group_end_.push_back(i + 1);
    if (i + 1 < slices.size()) prefix_bytes_.push_back(bytes);
  }
  ready_us_.assign(slices.size(), 0);
  measuring_ = !prefix_bytes_.empty();  // one group: nothing to split
}

void FirstBucketTuner::GradientReady(size_t slice) {
  if (measuring_ && slice < ready_us_.size()) ready_us_[slice] = NowMicros();
}

void FirstBucketTuner::BackwardEnded() {
  if (measuring_) backward_end_us_ = NowMicros();
}

bool FirstBucketTuner::StepDone(const std::vector<gossip::BucketTiming>& timings) {
  if (!measuring_) return false;
  ++steps_seen_;
  if (steps_seen_ <= kWarmupSteps) {
    if (steps_seen_ == kWarmupSteps) cpu_before_ = ReadCpuTimes();
    std::fill(ready_us_.begin(), ready_us_.end(), 0);
    return false;
  }
  // A step whose gradients were not all reported ready (a trainer that marks
  // no parameter, or a step cut short) says nothing about the overlap.
  const bool complete = !timings.empty() &&
                        std::none_of(ready_us_.begin(), ready_us_.end(), [](int64_t t) { return t == 0; });
  const bool due = steps_seen_ == kWarmupSteps + kMeasuredSteps;  // the same step on every rank
  if (!complete) {
    std::fill(ready_us_.begin(), ready_us_.end(), 0);
    return due;
  }
  // The moment each of the first k groups was final: the latest of their slices.
  std::vector<double> rest;
  int64_t ready = 0;
  size_t slice = 0;
  for (size_t g = 0; g + 1 < group_end_.size(); ++g) {
    for (; slice < group_end_[g]; ++slice) ready = std::max(ready, ready_us_[slice]);
    rest.push_back(static_cast<double>(std::max<int64_t>(0, backward_end_us_ - ready)));
  }
  rest_us_.push_back(std::move(rest));
  rest_default_us_.push_back(static_cast<double>(std::max<int64_t>(0, backward_end_us_ - timings[0].ready_us)));
  double wake = 0, call = 0, bytes = 0;
  int64_t line_free = 0;  // the communication thread's previous bucket ended
  for (const gossip::BucketTiming& t : timings) {
    wake = std::max(wake, static_cast<double>(t.begin_us - std::max(t.ready_us, line_free)));
    call += static_cast<double>(t.end_us - t.begin_us);
    bytes += static_cast<double>(t.wire_bytes);
    line_free = t.end_us;
  }
  wake_us_.push_back(std::max(0.0, wake));
  call_us_.push_back(call);
  calls_.push_back(static_cast<double>(timings.size()));
  wire_bytes_.push_back(bytes);
  std::fill(ready_us_.begin(), ready_us_.end(), 0);
  return due;
}

gossip::OverlapFigures FirstBucketTuner::Figures(double call_alpha_us) {
  cpu_after_ = ReadCpuTimes();
  gossip::OverlapFigures f;
  f.rest_us.assign(prefix_bytes_.size(), 0.0);
  if (rest_us_.empty()) return f;  // nothing measured: no spare core is claimed, so no split
  f.rest_us.clear();
  // Unknown idle time counts as no spare core: auto stays off where it cannot tell.
  f.spare_cores = std::max(0.0, IdleCores(cpu_before_, cpu_after_));
  f.alpha_us = call_alpha_us + MedianOf(wake_us_);
  std::vector<double> per_byte;
  for (size_t s = 0; s < call_us_.size(); ++s) {
    if (wire_bytes_[s] > 0) per_byte.push_back(std::max(0.0, call_us_[s] - calls_[s] * call_alpha_us) / wire_bytes_[s]);
  }
  f.per_byte_us = MedianOf(per_byte);
  f.rest_default_us = MedianOf(rest_default_us_);
  const size_t candidates = prefix_bytes_.size();
  for (size_t k = 0; k < candidates; ++k) {
    std::vector<double> at_k;
    for (const std::vector<double>& step : rest_us_) at_k.push_back(step[k]);
    f.rest_us.push_back(MedianOf(std::move(at_k)));
  }
  return f;
}

}  // namespace chorus::node
