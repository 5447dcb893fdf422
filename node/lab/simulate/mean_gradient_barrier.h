// The members' mean gradient of each step, for `chorus simulate
// --exact-lars-norm`: every virtual node hands its gradient over
// (trainer::Optimizer::SetMeanGradient) and waits for the others', so that
// LARS's trust ratio on every node sees the norm an all-reduce node would,
// whatever the exchange. A measuring instrument of the simulator, whose nodes
// share one process: no real node can know it without an all-reduce.
//
// Every member calls Arrive once a step (an empty gradient for a skipped
// step), in lock step: methods whose nodes run steps apart (pairwise-async)
// cannot use it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace chorus::node {

class MeanGradientBarrier {
 public:
  // `members`: the nodes that call Arrive every step; `timeout_s`: the
  // longest wait for the others (a failed node ends the run), after which
  // Arrive returns an empty span.
  MeanGradientBarrier(int members, double timeout_s) : members_(members), timeout_s_(timeout_s) {}

  // Adds `rank`'s `gradient` (empty: none this step) and waits for every
  // member's call; returns the mean of the gradients given (empty when none
  // was), summed in rank order (the same whatever order they came in),
  // valid until this member's next call.
  std::span<const float> Arrive(int rank, std::span<const float> gradient);

 private:
  const int members_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::vector<float>> given_;  // by rank; empty: none this step
  // By the generation's parity: a member reads generation g's while the
  // next is summed, and none can complete g + 2 before it called again.
  std::vector<float> mean_[2];
};

}  // namespace chorus::node
