// The exact consensus distance measured beside training, for members that
// do not evaluate after the same steps (pairwise-async, at their own pace or
// not): each member starts the k-th measurement at its own k-th point (the
// evaluation at the end of the k-th epoch, which members at their own pace
// reach at about the same cluster progress) over a copy of its master
// weights, and a thread of the meter's own runs the measurement's two
// all-reduces (gossip/protocols/consensus.h) while the node trains on. No
// member waits for another: a slow or frozen member delays only the
// measurement, which gives up at its deadline, unmeasured.
//
// The members of a measurement are the view's when it starts; a view that
// changes before every member has taken part ends it unmeasured (its tags
// carry the view's epoch). Its bytes are counted from its own sends and
// receives, since training moves bytes through the same transport at the
// same time.
//
// Must not: decide when to measure, or write records.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "gossip/transport/transport.h"
#include "node/control/membership.h"
#include "node/exchange/consensus_meter.h"

namespace chorus::node {

// One measurement's result: its key and the distance (< 0: not measured).
struct ConsensusMeasurement {
  int64_t key = 0;
  double distance = -1.0;
};

class BackgroundConsensusMeter {
 public:

  BackgroundConsensusMeter() = default;
  BackgroundConsensusMeter(const BackgroundConsensusMeter&) = delete;
  BackgroundConsensusMeter& operator=(const BackgroundConsensusMeter&) = delete;
  // Waits for the measurement in progress (its deadline at the latest).
  ~BackgroundConsensusMeter();

  // Starts measurement `key` (the same on every member for the same point;
  // tag call index 2 * key on gossip::kBackgroundDistanceTagStream) over the
  // members of `view`, which are the transport's peers, with a copy of
  // `master`, each wait ending after `timeout_s`. False, and nothing
  // started, while the previous one is still in progress (the other members
  // then give up on this one at their deadline).
  bool Start(gossip::Transport& transport, const MembershipView& view, std::span<const float> master, int64_t key,
             double timeout_s);
  // The measurements ended since the last call, in the order they started;
  // with `wait`, the one in progress first ends.
  std::vector<ConsensusMeasurement> Take(bool wait);

  // What the measurements cost so far (the one in progress: what it posted).
  MeasureCost cost() const;

  // Shared with the measuring thread's transport wrapper.
  struct Counts {
    std::atomic<uint64_t> sent{0}, received{0}, sent_across_sites{0}, micros{0};
  };

 private:
  struct Run;
  void Join();

  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::mutex mutex_;
  std::vector<ConsensusMeasurement> done_;  // under mutex_
  // Runs whose buffers a provider may still write into (a wait gave up while
  // the transport held them): kept for the meter's life.
  std::vector<std::unique_ptr<Run>> kept_;
  std::unique_ptr<Run> last_;
};

}  // namespace chorus::node
