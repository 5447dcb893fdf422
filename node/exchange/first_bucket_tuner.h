// FirstBucketTuner: the measurements behind `exchange.first_bucket_kib =
// -1` (auto), taken over the first steps of each membership epoch under the
// default bucket layout, for the overlap model (gossip/fusion/overlap_model.h):
// when each ready group's gradients were final against the end of backward,
// how long the bucket all-reduces took and how long the communication thread
// took to start them, and how many cores the host left idle meanwhile.
//
// Must not: communicate or log (the all-reduce exchange gathers the ranks'
// figures and decides); GradientReady may run on any compute thread, one
// slice at a time per slice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/host_info.h"
#include "gossip/fusion/fusion.h"
#include "gossip/fusion/fusion_engine.h"
#include "gossip/fusion/overlap_model.h"

namespace chorus::node {

class FirstBucketTuner {
 public:
  // Steps skipped after a (re)build, then steps measured.
  static constexpr int kWarmupSteps = 3;
  static constexpr int kMeasuredSteps = 10;

  // Starts measuring for a layout of `slices` (backward order, as the
  // bucketer has them) whose elements are `element_bytes` on the wire.
  void Start(std::span<const gossip::ParamSlice> slices, size_t element_bytes);
  // Stops measuring (a decision was made, or auto is off).
  void Stop() { measuring_ = false; }
  bool measuring() const { return measuring_; }

  // Slice `slice`'s gradient is final (compute thread).
  void GradientReady(size_t slice);
  // Backward has ended (before the wait for the buckets).
  void BackwardEnded();
  // The step's buckets are all-reduced; `timings` from the engine. True after
  // the last measured step, counted alike on every rank whatever each
  // measured (a step without every gradient reported ready is not a sample):
  // the figures are due.
  bool StepDone(const std::vector<gossip::BucketTiming>& timings);

  // This rank's figures, given the fixed cost of a small all-reduce call
  // measured now (the idle cores counted up to now). Without a measured step
  // it claims no spare core, so the model keeps the default layout.
  gossip::OverlapFigures Figures(double call_alpha_us);
  // Bytes of the first k ready groups, k = 1 .. groups - 1.
  const std::vector<size_t>& prefix_bytes() const { return prefix_bytes_; }

 private:
  bool measuring_ = false;
  int steps_seen_ = 0;
  std::vector<size_t> group_end_;      // one past each ready group's last slice
  std::vector<size_t> prefix_bytes_;
  std::vector<int64_t> ready_us_;      // by slice, this step
  int64_t backward_end_us_ = 0;
  CpuTimes cpu_before_;
  CpuTimes cpu_after_;
  // By measured step.
  std::vector<std::vector<double>> rest_us_;  // [step][k - 1]
  std::vector<double> rest_default_us_;
  std::vector<double> wake_us_;       // the slowest bucket start after it could start
  std::vector<double> call_us_;       // the buckets' all-reduce time, summed
  std::vector<double> calls_;         // buckets in the step
  std::vector<double> wire_bytes_;    // the buckets' bytes, summed
};

}  // namespace chorus::node
