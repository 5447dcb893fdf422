// Control-plane barriers (ControlPlane::Barrier, BarrierWhileTraining and the
// epoch boundary's; state in control_plane_impl.h).
//
// Every member sends its arrival (name, epoch, per-name sequence) to
// every member; one completes when all members of the epoch arrived. Arrivals
// are re-sent each tick to members still missing, and a node that already
// completed answers a re-sent arrival once, so lost frames cannot wedge it. An
// epoch change ends a barrier with Aborted.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <vector>

#include "common/log.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

// Completed barriers of one name kept to answer re-sent arrivals; older ones
// are forgotten so that a barrier per training step does not grow memory.
constexpr uint64_t kKeptBarriersPerName = 16;

}  // namespace

void ControlPlaneImpl::DropOldBarriers() {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    it = it->first.epoch < view_.epoch ? barriers_.erase(it) : std::next(it);
  }
  for (auto it = barrier_counters_.begin(); it != barrier_counters_.end();) {
    it = it->first.first < view_.epoch ? barrier_counters_.erase(it) : std::next(it);
  }
}

void ControlPlaneImpl::HandleBarrier(const msg::Barrier& b) {
  if (!formed_ || b.epoch < view_.epoch) return;
  auto counter = barrier_counters_.find({b.epoch, b.name});
  if (counter != barrier_counters_.end() && b.seq + kKeptBarriersPerName < counter->second) return;  // long done
  BarrierState& st = barriers_[BarrierKey{b.epoch, b.name, b.seq}];
  st.arrived.insert(b.sender);
  st.advance |= b.advance;
  st.value = std::max(st.value, b.value);
  if (st.done && !b.reply) {
    SendTo(b.sender, msg::Barrier{b.name, b.epoch, b.seq, self_.name, st.my_advance, true, st.my_value}, false);
  }
  cv_.notify_all();
}

void ControlPlaneImpl::ResendBarriers() {
  for (const auto& [key, st] : barriers_) {
    if (!st.mine || st.done || key.epoch != view_.epoch) continue;
    const msg::Barrier arrival{key.name, key.epoch, key.seq, self_.name, st.my_advance, false, st.my_value};
    for (const Member& m : view_.members) {
      if (m.name != self_.name && !st.arrived.count(m.name)) SendTo(m.name, arrival, false);
    }
  }
}

bool ControlPlaneImpl::TrainedSince(const std::string& name, Clock::time_point since) const {
  auto it = samples_heard_.find(name);
  return it != samples_heard_.end() && it->second.samples > 0 && it->second.at > since;
}

Status ControlPlaneImpl::BarrierInternal(const std::string& name, uint64_t epoch, bool advance, int64_t value,
                                         Deadline deadline, bool* advance_seen, int64_t* agreed,
                                         std::vector<std::string>* missing_out, int windows) {
  std::unique_lock<std::mutex> lock(mu_);
  if (phase_ != Phase::kMember) {
    return FailedPrecondition("barrier '" + name + "': " + self_.name + " is not a cluster member (" +
                              std::string(PhaseName(phase_)) + ")");
  }
  // Not the current epoch's: a caller still installing an older epoch (its
  // arrival would count in the newer epoch's barrier of the same name, and the
  // members there would go on without it), or one this node has not seen.
  if (epoch != view_.epoch) {
    if (epoch < view_.epoch) {
      return Aborted("barrier '" + name + "' of epoch " + std::to_string(epoch) +
                     ": the membership changed to epoch " + std::to_string(view_.epoch) + " already");
    }
    return FailedPrecondition("barrier '" + name + "' of epoch " + std::to_string(epoch) + ": " +
                              self_.name + " is at epoch " + std::to_string(view_.epoch));
  }
  const BarrierKey key{epoch, name, barrier_counters_[{epoch, name}]++};
  {
    BarrierState& st = barriers_[key];
    st.arrived.insert(self_.name);
    st.mine = true;
    st.my_advance = advance;
    st.advance |= advance;
    st.my_value = value;
    st.value = std::max(st.value, value);
  }
  const msg::Barrier arrival{name, epoch, key.seq, self_.name, advance, false, value};
  asio::post(io_, [this, arrival] {
    Locked([&] {
      if (!formed_ || view_.epoch != arrival.epoch) return;
      for (const Member& m : view_.members) {
        if (m.name != self_.name) SendTo(m.name, arrival, true);
      }
    });
  });
  auto missing = [&] {
    std::vector<std::string> names;
    auto it = barriers_.find(key);
    for (const Member& m : view_.members) {
      if (it == barriers_.end() || !it->second.arrived.count(m.name)) names.push_back(m.name);
    }
    return names;
  };
  auto stop = [&] { return phase_ != Phase::kMember || view_.epoch != epoch || missing().empty(); };
  const Clock::duration window = deadline.Remaining();
  std::vector<std::string> stalled;  // missing at the last deadline, their training standing still
  for (int waited = 1;; ++waited) {
    const Clock::time_point began = Clock::now();
    WaitUntil(lock, deadline, stop);
    if (stop() || waited >= windows) break;
    const std::vector<std::string> late = missing();
    std::copy_if(late.begin(), late.end(), std::back_inserter(stalled),
                 [&](const std::string& n) { return !TrainedSince(n, began); });
    if (!stalled.empty()) break;
    CHORUS_LOG_WARN(Subsys::kControl, "barrier '", name, "' of epoch ", epoch, ": ", JoinNames(late),
                    " not here yet but still training: waiting ", std::chrono::duration<double>(window).count(),
                    " s more (", waited, " of at most ", windows, " waits)");
    deadline = Deadline::After(window);
  }
  if (phase_ == Phase::kMember && view_.epoch == epoch && missing().empty()) {
    BarrierState& st = barriers_[key];
    st.done = true;
    *advance_seen = st.advance;
    *agreed = st.value;
    if (key.seq >= kKeptBarriersPerName) {
      barriers_.erase(barriers_.lower_bound(BarrierKey{epoch, name, 0}),
                      barriers_.lower_bound(BarrierKey{epoch, name, key.seq - kKeptBarriersPerName}));
    }
    return Status::Ok();
  }
  auto it = barriers_.find(key);
  if (it != barriers_.end()) it->second.mine = false;  // stop re-sending an abandoned arrival
  if (phase_ != Phase::kMember) {
    return FailedPrecondition("barrier '" + name + "': " + self_.name + " is no longer a cluster member (" +
                              std::string(PhaseName(phase_)) + ")");
  }
  if (view_.epoch != epoch) {
    return Aborted("barrier '" + name + "' of epoch " + std::to_string(epoch) +
                   ": the membership changed to epoch " + std::to_string(view_.epoch) +
                   " before every member arrived");
  }
  if (missing_out != nullptr) *missing_out = stalled.empty() ? missing() : stalled;
  return DeadlineExceeded("barrier '" + name + "' of epoch " + std::to_string(epoch) + ": no arrival from " +
                          JoinNames(missing()) + " by the deadline" +
                          (stalled.empty() ? "" : " (not training: " + JoinNames(stalled) + ")"));
}

}  // namespace chorus::node
