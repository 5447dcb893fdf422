// gossip/fusion/: tensor fusion: gradients packed into buckets, each
// all-reduced as it fills, while backward goes on.
//
// FusionEngine: overlaps gradient all-reduce with backward. The trainer's
// gradient-ready hook calls MarkReady(param); when that completes a bucket
// (fusion.h), the engine's communication thread all-reduces the bucket while
// backward goes on; WaitAll(deadline) before the optimizer waits for the rest.
//
// Buckets are all-reduced strictly in bucket order (0, 1, ..) on every rank, so
// ranks that mark parameters in different orders still meet in the same
// collective. Bucket b uses tags options.allreduce.tag_base + b * kTagsPerCollective.
// Contiguous buckets are reduced in place; others are packed into a staging
// buffer owned by the engine and unpacked after.
//
// Must not: touch a bucket's gradients before every parameter of it is marked
// ready, or after WaitAll returned; log (the caller of WaitAll does).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/fusion/fusion.h"
#include "gossip/fusion/fusion_trace.h"

namespace chorus::gossip {

struct FusionOptions {
  // Template of every bucket's all-reduce: algorithm, segments, pre/post scale
  // (e.g. post_scale = 1/n to average), tag_base of bucket 0. Its deadline is
  // ignored: each bucket gets now + bucket_timeout when it starts.
  AllreduceOptions allreduce;
  Duration bucket_timeout = std::chrono::seconds(30);
  // Where the begin/end of each bucket's all-reduce goes; may be null. Not owned:
  // must outlive the engine. Called from the communication thread.
  CommTraceSink* trace = nullptr;
  // FP16 on the wire: each bucket is scaled by allreduce.pre_scale and by the
  // wire scale (SetWireScale) in FP32, rounded to binary16, summed as FP16
  // (FP32 accumulation per addition), widened back and divided by the wire
  // scale. With the loss scale as the wire scale the values travel as backward
  // computed them in FP16, so small gradients keep their digits instead of
  // flushing to FP16's subnormals; with pre_scale summing to 1 over the ranks no
  // partial sum exceeds the largest contribution. A sum that overflows arrives
  // as Inf; the optimizer's finite check then skips the step.
  bool fp16_wire = false;
  // Measure what this rank puts into each step's all-reduces, before they run,
  // and the sums they return (FusionEngine::LastContribution): what a check
  // of every member's contribution needs (node/exchange/poison_check.h). One
  // more pass over each bucket on the communication thread.
  bool measure_contributions = false;
};

// One step of one rank, with FusionOptions::measure_contributions: the L2
// norm of its contribution (pre_scale applied), whether every element of it
// was finite on the wire (an FP16 wire value above 65504 is not), and the
// L2 norm of the all-reduced result, which can never exceed the sum of the
// members' contribution norms.
struct StepContribution {
  double norm = 0;
  bool finite = true;
  double reduced_norm = 0;
  bool reduced_finite = true;
};

// When one bucket's all-reduce could start and ran in one step (NowMicros,
// common/clock.h).
struct BucketTiming {
  int64_t ready_us = 0;  // its last parameter was marked ready
  int64_t begin_us = 0;  // the communication thread began its all-reduce
  int64_t end_us = 0;    // and ended it
  size_t wire_bytes = 0;
};

class FusionEngine {
 public:
  // `collective` and `grads` (at least bucketer.RequiredElems() elements) must
  // outlive the engine. Starts the communication thread.
  static Result<std::unique_ptr<FusionEngine>> Create(const Collective& collective,
                                                      GradientBucketer bucketer,
                                                      std::span<float> grads,
                                                      FusionOptions options);
  // Stops the communication thread; a bucket in flight finishes or reaches its
  // deadline first. Keeps the staging buffers for good while the transport
  // has receives it could not release (Transport::UnreleasedBuffers).
  ~FusionEngine();
  FusionEngine(const FusionEngine&) = delete;
  FusionEngine& operator=(const FusionEngine&) = delete;

  // Marks a parameter's gradient final for this step (any thread, any order).
  // Fails on a bad or repeated index, or once the engine has failed.
  [[nodiscard]] Status MarkReady(size_t param);
  // Waits until every bucket of this step is all-reduced and unpacked, then
  // starts the next step. Returns the step's first error, or DeadlineExceeded
  // naming the bucket still pending. After an error the engine stays failed:
  // build a new one (e.g. over the re-formed membership).
  [[nodiscard]] Status WaitAll(Deadline deadline);

  // FP16 on the wire: the factor buckets are multiplied by before the cast
  // and divided by after the sum (> 0; a power of two keeps both exact). The
  // same on every rank (the loss scale, equal on every node under all-reduce);
  // set between steps. 1 until set.
  void SetWireScale(float scale) { wire_scale_.store(scale > 0 ? scale : 1.0f, std::memory_order_relaxed); }
  // From the next step on, every bucket goes through Collective::AuditedAllreduce
  // (each member's contribution whole to the rank that sums it) instead of
  // the chosen algorithm, and LastAudit says what this rank sent, received
  // and summed. The same on every rank; set between steps.
  void SetAudited(bool on) { audited_.store(on, std::memory_order_relaxed); }
  bool audited() const { return audited_.load(std::memory_order_relaxed); }

  const GradientBucketer& bucketer() const { return bucketer_; }
  // Steps completed by WaitAll so far.
  int64_t step() const;
  // The buckets' timings in the step WaitAll last completed (empty before).
  std::vector<BucketTiming> LastStepTimings() const;
  // The step WaitAll last completed (FusionOptions::measure_contributions;
  // zeros without it).
  StepContribution LastContribution() const;
  // The step WaitAll last completed, audited (SetAudited): its buckets'
  // AuditFigures added up, in the units of LastContribution (pre_scale
  // applied, the wire scale taken out); empty when it was not audited.
  AuditFigures LastAudit() const;

 private:
  FusionEngine(const Collective& collective, GradientBucketer bucketer, std::span<float> grads,
               FusionOptions options);
  void Worker();
  Status RunBucket(size_t bucket, int64_t step);

  const Collective& collective_;
  const std::span<float> grads_;
  const FusionOptions options_;
  std::vector<std::vector<float>> staging_;  // by bucket; empty for contiguous ones
  std::vector<std::vector<uint16_t>> half_staging_;  // by bucket, when fp16_wire
  std::atomic<float> wire_scale_{1.0f};
  std::atomic<bool> audited_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  GradientBucketer bucketer_;  // guarded by mu_ (marks); layout is immutable
  size_t next_ = 0;            // next bucket the worker runs this step
  bool running_ = false;       // the worker is inside RunBucket
  int64_t step_ = 0;
  std::vector<BucketTiming> timings_;       // this step's, by bucket
  std::vector<BucketTiming> last_timings_;  // the last completed step's
  // measure_contributions: sums of squares and finite flags of this step's
  // buckets so far (the communication thread's), and the last completed step's.
  struct Sums {
    double sumsq = 0, reduced_sumsq = 0;
    bool finite = true, reduced_finite = true;
    AuditFigures audit;  // audited buckets only
  };
  Sums sums_;                 // under mu_ once a bucket is done
  StepContribution last_contribution_;
  AuditFigures last_audit_;
  Status failed_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace chorus::gossip
