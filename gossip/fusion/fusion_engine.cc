// FusionEngine (see fusion_engine.h).
//
// One mutex guards the marks, the cursor `next_` and the failure; the worker
// thread sleeps on `cv_` until bucket next_ is complete, runs it without the lock
// (the trainer no longer writes those gradients), and advances. WaitAll sleeps on
// the same condition variable until next_ reaches the bucket count.
#include "gossip/fusion/fusion_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/fp16.h"
#include "kernels/ops.h"

namespace chorus::gossip {

namespace {

// The wire's conversions, through the kernels' vectorised ones (the same
// bits as FloatToHalfBits and HalfBitsToFloat) in blocks below their
// threading size, so that they stay on this thread beside a busy trainer.
constexpr size_t kConvertBlock = 4096;

// half[i] = half(x[i] * scale); x is left as it is (a failed all-reduce
// hands the caller back its own gradients).
void ScaledToHalf(std::span<const float> x, float scale, uint16_t* half) {
  float scaled[kConvertBlock];
  for (size_t begin = 0; begin < x.size(); begin += kConvertBlock) {
    const size_t n = std::min(kConvertBlock, x.size() - begin);
    for (size_t i = 0; i < n; ++i) scaled[i] = x[begin + i] * scale;
    kernels::FloatToHalf(scaled, half + begin, n);
  }
}

// x[i] = float(half[i]) * scale.
void HalfToScaled(const uint16_t* half, float scale, std::span<float> x) {
  for (size_t begin = 0; begin < x.size(); begin += kConvertBlock) {
    const size_t n = std::min(kConvertBlock, x.size() - begin);
    kernels::HalfToFloat(half + begin, x.data() + begin, n);
    for (size_t i = begin; i < begin + n; ++i) x[i] *= scale;
  }
}

}  // namespace

Result<std::unique_ptr<FusionEngine>> FusionEngine::Create(const Collective& collective,
                                                           GradientBucketer bucketer,
                                                           std::span<float> grads,
                                                           FusionOptions options) {
  if (grads.size() < bucketer.RequiredElems()) {
    return Err(InvalidArgument("fusion engine: gradient buffer of " +
                               std::to_string(grads.size()) + " elements, the parameter table needs " +
                               std::to_string(bucketer.RequiredElems())));
  }
  if (options.allreduce.inflight_segments < 1) {
    return Err(InvalidArgument("fusion engine: inflight_segments must be >= 1"));
  }
  return std::unique_ptr<FusionEngine>(
      new FusionEngine(collective, std::move(bucketer), grads, std::move(options)));
}

FusionEngine::FusionEngine(const Collective& collective, GradientBucketer bucketer,
                           std::span<float> grads, FusionOptions options)
    : collective_(collective),
      grads_(grads),
      options_(std::move(options)),
      bucketer_(std::move(bucketer)) {
  staging_.resize(bucketer_.buckets().size());
  timings_.resize(bucketer_.buckets().size());
  for (size_t b = 0; b < staging_.size(); ++b) {
    const GradientBucket& bucket = bucketer_.buckets()[b];
    if (!bucket.contiguous) staging_[b].resize(bucket.elems);
  }
  if (options_.fp16_wire) {
    half_staging_.resize(bucketer_.buckets().size());
    for (size_t b = 0; b < half_staging_.size(); ++b) half_staging_[b].resize(bucketer_.buckets()[b].elems);
  }
  worker_ = std::thread([this] { Worker(); });
}

FusionEngine::~FusionEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  // A receive the provider did not release after its cancel may still be
  // written into the staging buffers (a frozen peer that wakes halfway
  // through a message): they are kept for good, never freed for reuse.
  KeepWhileUnreleased(collective_.transport(), staging_);
  KeepWhileUnreleased(collective_.transport(), half_staging_);
}

Status FusionEngine::MarkReady(size_t param) {
  std::optional<size_t> completed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    auto marked = bucketer_.MarkReady(param);
    if (!marked) return marked.error().WithContext("fusion engine step " + std::to_string(step_));
    completed = *marked;
    if (completed) timings_[*completed].ready_us = NowMicros();
  }
  if (completed) cv_.notify_all();
  return Status::Ok();
}

Status FusionEngine::WaitAll(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t buckets = bucketer_.buckets().size();
  auto finished = [&] { return !failed_.ok() || (next_ == buckets && !running_); };
  if (deadline.IsNever()) {
    cv_.wait(lock, finished);
  } else {
    cv_.wait_until(lock, deadline.when(), finished);
  }
  if (!failed_.ok()) return failed_;
  if (next_ < buckets || running_) {
    std::string what = "fusion engine step " + std::to_string(step_) + ": bucket " +
                       std::to_string(next_) + " of " + std::to_string(buckets);
    if (running_) {
      what += " still being all-reduced";
    } else {
      what += " still waiting for parameter " +
              std::to_string(bucketer_.FirstUnready(next_).value_or(0)) + " (never marked ready?)";
    }
    failed_ = DeadlineExceeded(what + " at the WaitAll deadline");
    cv_.notify_all();
    return failed_;
  }
  bucketer_.Reset();
  next_ = 0;
  ++step_;
  last_contribution_ = {std::sqrt(sums_.sumsq), sums_.finite, std::sqrt(sums_.reduced_sumsq), sums_.reduced_finite};
  last_audit_ = std::move(sums_.audit);
  sums_ = Sums{};
  last_timings_.swap(timings_);
  timings_.assign(buckets, BucketTiming{});
  return Status::Ok();
}

int64_t FusionEngine::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

StepContribution FusionEngine::LastContribution() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_contribution_;
}

AuditFigures FusionEngine::LastAudit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_audit_;
}

std::vector<BucketTiming> FusionEngine::LastStepTimings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_timings_;
}

void FusionEngine::Worker() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] {
      return stop_ || (failed_.ok() && next_ < bucketer_.buckets().size() &&
                       bucketer_.BucketReady(next_));
    });
    if (stop_) return;
    const size_t bucket = next_;
    const int64_t step = step_;
    running_ = true;
    lock.unlock();
    const int64_t begin_us = NowMicros();
    Status s = RunBucket(bucket, step);
    const int64_t end_us = NowMicros();
    lock.lock();
    running_ = false;
    timings_[bucket].begin_us = begin_us;
    timings_[bucket].end_us = end_us;
    timings_[bucket].wire_bytes =
        bucketer_.buckets()[bucket].elems * (options_.fp16_wire ? sizeof(uint16_t) : sizeof(float));
    if (!s.ok() && failed_.ok()) failed_ = s;
    ++next_;
    cv_.notify_all();
  }
}

Status FusionEngine::RunBucket(size_t bucket, int64_t step) {
  const GradientBucket& b = bucketer_.buckets()[bucket];
  CommSpan span;
  span.begin_us = NowMicros();
  AllreduceOptions options = options_.allreduce;
  options.tag_base = options_.allreduce.tag_base + static_cast<Tag>(bucket) * kTagsPerCollective;
  options.deadline = Deadline::After(options_.bucket_timeout);

  std::span<float> data =
      b.contiguous ? bucketer_.InPlace(bucket, grads_) : std::span<float>(staging_[bucket]);
  if (!b.contiguous) bucketer_.Pack(bucket, grads_, data);
  Sums sums;
  if (options_.measure_contributions) {
    const double pre = options.pre_scale;
    const double limit = options_.fp16_wire ? kHalfMax / (pre * wire_scale_.load(std::memory_order_relaxed))
                                            : std::numeric_limits<float>::max();  // Inf and NaN not
    sums.sumsq = kernels::SumSquaresWithin(data.size(), data.data(), limit, &sums.finite) * pre * pre;
  }
  Status s;
  size_t wire_bytes = data.size_bytes();
  const bool audited = audited_.load(std::memory_order_relaxed);
  if (options_.fp16_wire) {
    std::vector<uint16_t>& half = half_staging_[bucket];
    const float wire = wire_scale_.load(std::memory_order_relaxed);
    const float pre = options.pre_scale * wire;
    ScaledToHalf(data, pre, half.data());
    options.pre_scale = 1.0f;
    s = audited ? collective_.AuditedAllreduce(std::span<uint16_t>(half), options, &sums.audit)
                : collective_.Allreduce(std::span<uint16_t>(half), options);
    if (audited) sums.audit.Scale(1.0 / (static_cast<double>(wire) * wire));  // to LastContribution's units
    if (s.ok()) {
      HalfToScaled(half.data(), 1.0f / wire, data);
    }
    wire_bytes = half.size() * sizeof(uint16_t);
  } else {
    s = audited ? collective_.AuditedAllreduce(data, options, &sums.audit) : collective_.Allreduce(data, options);
  }
  if (s.ok() && options_.measure_contributions) {
    sums.reduced_sumsq = kernels::SumSquaresWithin(data.size(), data.data(), std::numeric_limits<float>::max(),
                                                   &sums.reduced_finite);
    std::lock_guard<std::mutex> lock(mu_);
    sums_.sumsq += sums.sumsq;
    sums_.reduced_sumsq += sums.reduced_sumsq;
    sums_.finite = sums_.finite && sums.finite;
    sums_.reduced_finite = sums_.reduced_finite && sums.reduced_finite;
    sums_.audit.Add(sums.audit);
  }
  if (s.ok() && !b.contiguous) bucketer_.Unpack(bucket, data, grads_);

  if (options_.trace != nullptr) {
    span.end_us = NowMicros();
    span.name = "allreduce bucket " + std::to_string(bucket);
    span.step = step;
    span.bucket = bucket;
    span.bytes = wire_bytes;
    span.algorithm = collective_.Resolve(options, wire_bytes);
    span.ok = s.ok();
    options_.trace->Record(span);
  }
  if (!s.ok()) {
    return s.WithContext("fusion engine step " + std::to_string(step) + " bucket " +
                         std::to_string(bucket));
  }
  return Status::Ok();
}

}  // namespace chorus::gossip
