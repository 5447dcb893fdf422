// Ordered virtual time on the LocalHub (local_transport.h, event_order.h):
// the lanes' bounds, whose turn it is, and the waits that take it.
//
// Every change that can move a bound (a lane's state or clock, a message
// queued or matched, a slot killed) calls ScheduleLocked, which wakes the
// lane whose event is now the earliest if that lane waits for it; a waiting
// lane re-checks IsFirstLocked on every wake. Only one lane is woken per
// change, so a simulation of n nodes costs O(n) per change, not O(n^2).
#include <algorithm>
#include <limits>

#include "gossip/transport/local/local_hub_state.h"
#include "gossip/transport/local/local_transport.h"

namespace chorus::gossip {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// The slot whose server lane this thread is (ServeHere), on which hub.
thread_local const LocalHub* tl_serving_hub = nullptr;
thread_local int tl_serving_slot = -1;

using State = LocalHub::Lane::State;

}  // namespace

int LocalHub::LaneOfCallerLocked(int slot) const {
  return tl_serving_hub == this && tl_serving_slot == slot ? kServerLane : kOwnerLane;
}

double& LocalHub::LaneClockLocked(int slot, int lane) {
  Slot& s = *slots_[slot];
  return lane == kOwnerLane ? s.virtual_now : s.lanes[kServerLane].clock;
}

double LocalHub::BoundLocked(int slot, int lane) const {
  const Slot& s = *slots_[slot];
  const Lane& l = s.lanes[lane];
  const double clock = lane == kOwnerLane ? s.virtual_now : l.clock;
  switch (l.state) {
    case State::kOff:
    case State::kParked:
      return kNever;
    case State::kRunning:
    case State::kTurn:
      return clock;
    case State::kOp:
      if (l.op == nullptr || !l.op->done) return kNever;
      // A failed receive returns at once; a matched one at its arrival.
      return l.op->status.ok() ? std::max(clock, l.op->virtual_done) : clock;
    case State::kMessage: {
      const Message* served = ServedMessageLocked(slot);
      return served == nullptr ? kNever : std::max(clock, served->virtual_arrival);
    }
  }
  return kNever;
}

const LocalHub::Message* LocalHub::ServedMessageLocked(int slot) const {
  const Slot& s = *slots_[slot];
  const Tag tag = s.lanes[kServerLane].tag;
  const Message* first = nullptr;
  for (const Message& m : s.unexpected) {
    if (m.tag != tag || RankOfSlotLocked(slot, m.from) < 0) continue;
    if (first == nullptr || m.virtual_arrival < first->virtual_arrival ||
        (m.virtual_arrival == first->virtual_arrival && m.from < first->from)) {
      first = &m;
    }
  }
  return first;
}

int LocalHub::FirstLaneLocked() const {
  // Lanes in id order, a strictly smaller bound replacing: ties go to the lower id.
  double best = kNever;
  int best_id = -1;
  for (int s = 0; s < world_size(); ++s) {
    for (int l = 0; l < 2; ++l) {
      const double b = BoundLocked(s, l);
      if (b < best) {
        best = b;
        best_id = 2 * s + l;
      }
    }
  }
  return best_id;
}

void LocalHub::WaitOnLaneLocked(std::unique_lock<std::mutex>& lock, Lane& lane, Deadline deadline) {
  lane.cv.wait_until(lock, deadline.IsNever() ? Clock::now() + std::chrono::seconds(1) : deadline.when());
}

void LocalHub::ScheduleLocked() {
  const int best_id = FirstLaneLocked();
  if (best_id < 0) return;
  Lane& first = slots_[best_id / 2]->lanes[best_id % 2];
  if (first.state == State::kTurn || first.state == State::kOp || first.state == State::kMessage) {
    first.cv.notify_all();
  }
}

void LocalHub::SetLanesLocked(int slot, bool on) {
  Slot& s = *slots_[slot];
  s.lanes[kOwnerLane].state = on ? State::kRunning : State::kOff;
  if (!on) s.lanes[kServerLane].state = State::kOff;
  ScheduleLocked();
}

bool LocalHub::OrderedDoneLocked(const Op& op) const {
  if (!op.done) return false;
  return !op.status.ok() || IsFirstLocked(op.owner, op.lane);
}

Result<Completion> LocalHub::OrderedWaitLocked(std::unique_lock<std::mutex>& lock, Op& op, Deadline deadline,
                                               const std::string& peer_name) {
  const int lane = LaneOfCallerLocked(op.owner);
  Lane& l = slots_[op.owner]->lanes[lane];
  const State before = l.state;
  l.state = State::kOp;
  l.op = &op;
  ScheduleLocked();
  auto leave = [&] {
    l.state = before == State::kOff ? State::kOff : State::kRunning;
    l.op = nullptr;
    ScheduleLocked();
  };
  while (true) {
    if (op.done && !op.status.ok()) {
      leave();
      return Err(op.status);
    }
    if (op.done && IsFirstLocked(op.owner, lane)) {
      double& clock = LaneClockLocked(op.owner, lane);
      clock = std::max(clock, op.virtual_done);
      leave();
      return op.completion;
    }
    if (deadline.Expired()) break;
    WaitOnLaneLocked(lock, l, deadline);
  }
  leave();
  Status timeout = DeadlineExceeded("receive from " + peer_name + " (tag " + std::to_string(op.tag) +
                                    ") ran past its deadline" +
                                    (op.done ? " waiting for its turn in virtual time" : ""));
  if (!op.done) CancelLocked(op, timeout);
  return Err(timeout);
}

// ---- LocalTransport's EventOrder ----

Status LocalTransport::AwaitTurn(Deadline deadline) {
  std::unique_lock<std::mutex> lock(hub_->mu_);
  LocalHub::Lane& l = hub_->slots_[slot_]->lanes[LocalHub::kOwnerLane];
  l.state = State::kTurn;
  hub_->ScheduleLocked();
  while (!hub_->IsFirstLocked(slot_, LocalHub::kOwnerLane)) {
    if (deadline.Expired()) {
      l.state = State::kRunning;
      hub_->ScheduleLocked();
      return DeadlineExceeded(hub_->SlotName(slot_) + ": its turn in virtual time did not come by the deadline");
    }
    hub_->WaitOnLaneLocked(lock, l, deadline);
  }
  l.state = State::kRunning;
  hub_->ScheduleLocked();
  return Status::Ok();
}

void LocalTransport::Pause(double seconds) { hub_->AdvanceVirtual(slot_, seconds); }

void LocalTransport::OpenServing(Tag tag) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  LocalHub::Slot& s = *hub_->slots_[slot_];
  LocalHub::Lane& server = s.lanes[LocalHub::kServerLane];
  server.state = State::kMessage;
  server.tag = tag;
  server.clock = std::max(server.clock, s.virtual_now);
  hub_->ScheduleLocked();
}

void LocalTransport::ServeHere() {
  tl_serving_hub = hub_.get();
  tl_serving_slot = slot_;
}

void LocalTransport::CloseServing() {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  hub_->slots_[slot_]->lanes[LocalHub::kServerLane].state = State::kOff;
  hub_->ScheduleLocked();
}

Result<Rank> LocalTransport::AwaitMessage(Deadline deadline) {
  std::unique_lock<std::mutex> lock(hub_->mu_);
  LocalHub::Slot& s = *hub_->slots_[slot_];
  LocalHub::Lane& l = s.lanes[LocalHub::kServerLane];
  l.state = State::kMessage;
  hub_->ScheduleLocked();
  while (true) {
    if (hub_->IsFirstLocked(slot_, LocalHub::kServerLane)) {
      const LocalHub::Message* first = hub_->ServedMessageLocked(slot_);
      l.clock = std::max(l.clock, first->virtual_arrival);
      l.state = State::kRunning;
      const Rank source = hub_->RankOfSlotLocked(slot_, first->from);
      hub_->ScheduleLocked();
      return source;
    }
    if (deadline.Expired()) return Err(DeadlineExceeded(hub_->SlotName(slot_) + ": no message to serve"));
    hub_->WaitOnLaneLocked(lock, l, deadline);
  }
}

void LocalTransport::Park() {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  hub_->slots_[slot_]->lanes[LocalHub::kOwnerLane].state = State::kParked;
  hub_->ScheduleLocked();
}

Status LocalTransport::Unpark(Deadline deadline) { return AwaitTurn(deadline); }

void LocalTransport::WakeOwner() {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  LocalHub::Slot& s = *hub_->slots_[slot_];
  LocalHub::Lane& owner = s.lanes[LocalHub::kOwnerLane];
  if (owner.state != State::kParked) return;
  s.virtual_now = std::max(s.virtual_now, hub_->LaneClockLocked(slot_, hub_->LaneOfCallerLocked(slot_)));
  owner.state = State::kTurn;
  hub_->ScheduleLocked();
}

}  // namespace chorus::gossip
