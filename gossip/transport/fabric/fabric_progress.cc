// FabricCore progress (design in fabric_core.h, "Progress" and "Deadlines"):
// Poll, which reads the CQ under cq_mu_ and then retries the backlog, runs due
// discard sweeps and opens first-contact gates; the handling of each completion
// and CQ error; fixing an op's result (Finish); a Request's Wait (busy poll,
// yielding spin, then sleep) and the cancel-and-reap of an op past its
// deadline; and the progress thread with its back-off. Must not: free an op
// whose context the provider may still hold (only a reaped completion or
// Shutdown releases it), spin without yielding beyond `busy_poll`, or poll
// while a waiter drives the CQ itself (the progress thread stands aside).
#include "gossip/transport/fabric/fabric_core.h"

#include <sys/prctl.h>

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace chorus::gossip::fabric {

// Longest a wait polls the CQ itself before sleeping (see FabricOptions::wait_spin_per_mib).
constexpr int64_t kMaxWaitSpinUs = 64000;

int FabricCore::Poll(bool block) {
  std::unique_lock<std::mutex> lock(cq_mu_, std::defer_lock);
  if (block) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return 0;
  }
  if (closed_) return 0;
  if (has_deferred_cancels_.load(std::memory_order_relaxed)) RunDeferredCancels();
  int handled = 0;
  fi_cq_tagged_entry entries[kCqBatch];
  fi_addr_t sources[kCqBatch];
  while (true) {
    const ssize_t n = InProvider(ProviderCallClock::kNoPeer,
                                 [&] { return fi_cq_readfrom(cq_.get(), entries, kCqBatch, sources); });
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) handled += HandleCompletion(entries[i], sources[i]);
      if (n < static_cast<ssize_t>(kCqBatch)) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      handled += HandleCqError();
      continue;
    }
    if (n != -FI_EAGAIN) {
      CHORUS_LOG_ERROR(Subsys::kFabric, describe_, ": ",
                       FabricStatus(static_cast<int>(n), "fi_cq_readfrom").ToString());
    }
    break;
  }
  if (backlog_size_.load() > 0) DrainBacklog();  // completions freed queue space
  if (discarding_.load(std::memory_order_relaxed)) SweepDiscardsWhenDue();
  lock.unlock();
  if (gates_count_.load() > 0) OpenGates();
  return handled;
}

namespace {

// A message longer than its receive: truncated by the provider (FI_ETRUNC),
// or spilled into the overflow sink of rxm's eager mode.
Status LongerThanItsBuffer(const FabricOp& op, size_t message_bytes) {
  return DataLoss(op.Describe() + ": message of " + std::to_string(message_bytes) + " bytes exceeds the " +
                  std::to_string(op.length) + "-byte buffer");
}
// The same, sealed: why the message is dropped unauthenticated.
std::string SealedLongerThanItsBuffer(size_t extra_bytes) {
  return "it was " + std::to_string(extra_bytes) + " bytes longer than the buffer";
}

}  // namespace

int FabricCore::HandleCompletion(const fi_cq_tagged_entry& entry, fi_addr_t source) {
  FabricOp& op = *OpOf(entry.op_context);
  if (op.kind == FabricOp::Kind::kPeek) {
    // A first-contact message waits for its receive (posted by SetPeers).
    if (entry.tag != kReservedTag) StartDrain(op, entry);
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kDrain) {
    messages_discarded_ += 1;
    CHORUS_LOG_DEBUG(Subsys::kFabric, describe_, ": dropped an unreceived message of tag ", entry.tag, " (",
                     entry.len, " bytes)");
    SweepSoon();  // more may wait behind it
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kContactSend) {
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kContactRecv) {
    NoteContactArrived(op.addr);
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 1;  // held sends go out in this Poll
  }
  if (op.kind == FabricOp::Kind::kSend) {
    bytes_sent_ += op.length;
    if (op.other_site) bytes_sent_across_sites_ += op.length;
    messages_sent_ += 1;
    Finish(op, Status::Ok(), Completion{op.peer, op.tag, op.length}, /*reaped=*/true);
    return 1;
  }
  Rank from = op.peer;
  if (op.addr == FI_ADDR_UNSPEC) {
    std::shared_lock lock(peers_mu_);
    auto it = peers_.rank_of.find(source);
    from = it == peers_.rank_of.end() ? -1 : it->second;
  }
  // Only a receive with the overflow sink completes longer than its buffer.
  const size_t capacity = op.length + (op.seal ? kSealTrailerBytes : 0);
  if (entry.len > capacity && !op.seal) {
    Finish(op, LongerThanItsBuffer(op, entry.len), {}, /*reaped=*/true);
    return 1;
  }
  if (op.seal) {
    // Counted, and checked further, by Unseal in the request's thread.
    if (from < 0) {
      op.rejected = "it came from fi_addr " + std::to_string(source) + ", which is not a member";
    } else if (entry.len < kSealTrailerBytes) {
      op.rejected = "its " + std::to_string(entry.len) + " bytes are shorter than a seal";
    } else if (entry.len > capacity) {
      op.rejected = SealedLongerThanItsBuffer(entry.len - capacity);
    }
    const size_t payload = entry.len < kSealTrailerBytes ? 0 : std::min(op.length, entry.len - kSealTrailerBytes);
    Finish(op, Status::Ok(), Completion{from, entry.tag, payload}, /*reaped=*/true);
    return 1;
  }
  if (from < 0) {
    Finish(op,
           Internal(op.Describe() + ": message from fi_addr " + std::to_string(source) +
                    ", which is not a member"),
           {}, /*reaped=*/true);
    return 1;
  }
  bytes_received_ += entry.len;
  messages_received_ += 1;
  Finish(op, Status::Ok(), Completion{from, entry.tag, entry.len}, /*reaped=*/true);
  return 1;
}

int FabricCore::HandleCqError() {
  fi_cq_err_entry err{};
  const ssize_t ret = InProvider(ProviderCallClock::kNoPeer, [&] { return fi_cq_readerr(cq_.get(), &err, 0); });
  if (ret < 0) return 0;  // -FI_EAGAIN: another reader took it
  FabricOp& op = *OpOf(err.op_context);
  if (op.Internal()) {
    // FI_ENOMSG: a peek found nothing to drop. FI_ECANCELED: the peer died
    // or left, or the transport closed. Anything else is worth a line; a
    // failed first contact leaves the pair unordered (its gate opens now).
    if (err.err != FI_ENOMSG && err.err != FI_ECANCELED) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", FabricStatus(-err.err, op.Describe()).ToString(),
                      op.IsContact() ? "; later messages go unordered" : "");
      if (op.kind == FabricOp::Kind::kContactRecv) NoteContactArrived(op.addr);
    }
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  Status status;
  if (err.err == FI_ECANCELED) {
    std::lock_guard<std::mutex> lock(op.mu);
    status = op.cancel_reason.ok() ? Cancelled(op.Describe() + ": cancelled") : op.cancel_reason;
  } else if (err.err == FI_ETRUNC && op.seal) {
    // Longer than any message the members send here: it cannot be
    // authenticated (its end is lost), so it is dropped like a forgery.
    op.rejected = SealedLongerThanItsBuffer(err.olen);
    Finish(op, Status::Ok(), Completion{op.peer, op.tag, 0}, /*reaped=*/true);
    return 1;
  } else if (err.err == FI_ETRUNC) {
    status = LongerThanItsBuffer(op, op.length + err.olen);
  } else {
    char buf[256] = {0};
    const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf, sizeof(buf));
    status = FabricStatus(-err.err, op.Describe());
    status = Status(status.code(), status.message() + " [provider: " +
                                       (detail != nullptr ? detail : "?") + "]");
  }
  Finish(op, std::move(status), {}, /*reaped=*/true);
  return 1;
}

void FabricCore::FailLocked(FabricOp& op, Status status) {
  if (op.finished.load()) return;
  op.status = std::move(status);
  op.finished.store(true);
  op.cv.notify_all();
}

void FabricCore::Finish(FabricOp& op, Status status, Completion completion, bool reaped) {
  {
    std::lock_guard<std::mutex> lock(op.mu);
    if (reaped && !op.reaped && op.unreleased) {
      unreleased_buffers_.fetch_sub(1);
      CHORUS_LOG_INFO(Subsys::kFabric, describe_, ": ", op.Describe(), " released by the provider at last");
    }
    if (reaped) op.reaped = true;
    if (!op.finished.load()) {
      op.status = std::move(status);
      op.completion = completion;
      op.finished.store(true);
    }
    op.cv.notify_all();
  }
  if (reaped) {
    std::shared_ptr<FabricOp> keep;  // released after the map lock
    std::lock_guard<std::mutex> lock(inflight_mu_);
    auto it = inflight_.find(&op);
    if (it != inflight_.end()) {
      keep = std::move(it->second);
      inflight_.erase(it);
    }
  }
}

Result<Completion> FabricCore::Wait(FabricOp& op, Deadline deadline) {
  if (!op.finished.load()) {
    // Phase 1: drive the CQ ourselves, first for `busy_poll` without yielding
    // (the clock read every 16 polls), then for the spin budget yielding
    // between polls.
    const auto spin = std::min<std::chrono::microseconds>(
        options_.wait_spin + options_.wait_spin_per_mib * static_cast<int64_t>(op.length) / (int64_t{1} << 20),
        std::chrono::microseconds(kMaxWaitSpinUs));
    const auto start = Clock::now();
    const auto busy_until = std::min(start + options_.busy_poll, deadline.when());
    const auto spin_until = std::min(start + options_.busy_poll + spin, deadline.when());
    bool busy = options_.busy_poll.count() > 0;
    spinning_waiters_.fetch_add(1);
    for (int polls = 1; !op.finished.load(); ++polls) {
      const int handled = Poll(/*block=*/false);
      if (busy) {
        busy = polls % 16 != 0 || Clock::now() < busy_until;
        continue;
      }
      if (Clock::now() >= spin_until) break;
      if (handled == 0 && !op.finished.load()) std::this_thread::yield();
    }
    spinning_waiters_.fetch_sub(1);
  }
  if (!op.finished.load() && !deadline.Expired()) {
    // Phase 2: sleep; the progress thread polls and notifies.
    blocked_waiters_.fetch_add(1);
    WakeProgress();
    std::unique_lock<std::mutex> lock(op.mu);
    while (!op.finished.load()) {
      if (deadline.IsNever()) {
        op.cv.wait(lock);
      } else if (op.cv.wait_until(lock, deadline.when()) == std::cv_status::timeout) {
        break;
      }
    }
    blocked_waiters_.fetch_sub(1);
  }
  if (!op.finished.load()) {
    CancelAndReap(op, DeadlineExceeded(op.Describe() + " ran past its deadline"));
  }
  std::lock_guard<std::mutex> lock(op.mu);
  if (!op.status.ok()) return Err(op.status);
  return op.completion;
}

void FabricCore::CancelAndReap(FabricOp& op, Status reason) {
  if (RemoveFromBacklog(op)) {  // never reached the provider: nothing to reap
    Finish(op, std::move(reason), {}, /*reaped=*/true);
    return;
  }
  const Clock::time_point started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(op.mu);
    if (op.reaped) {
      FailLocked(op, reason);  // no-op when a real completion is already there
      return;
    }
    if (op.cancel_reason.ok()) op.cancel_reason = reason;
  }
  {
    std::lock_guard<std::mutex> lock(cq_mu_);
    if (!closed_) InProvider(ProviderCallClock::kNoPeer, [&] { return fi_cancel(&ep_.get()->fid, &op.ctx.context); });
  }
  Backoff backoff(std::chrono::microseconds(200));
  while (true) {
    bool expired;
    {
      std::lock_guard<std::mutex> lock(op.mu);
      if (op.reaped) break;
      // From the peer's death when it was marked (PeerGone may move that back
      // while we wait), else from this cancel.
      const Clock::time_point from = op.cancelled_at == Clock::time_point{} ? started : op.cancelled_at;
      expired = Clock::now() - from >= options_.cancel_timeout;
    }
    if (expired) {
      {
        std::lock_guard<std::mutex> lock(op.mu);
        if (op.reaped) break;
        if (!op.unreleased) {
          op.unreleased = true;
          unreleased_buffers_.fetch_add(1);
        }
      }
      // A receive's buffer may still be written, a send's still read (a
      // segment copied out of it when the peer wakes).
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", op.Describe(),
                      " not released by the provider after cancel; its context stays owned "
                      "by the transport until it completes, and its buffer must outlive it "
                      "(Transport::UnreleasedBuffers)");
      break;
    }
    if (Poll(/*block=*/false) == 0) backoff.Pause();
  }
  std::lock_guard<std::mutex> lock(op.mu);
  FailLocked(op, reason);
}

void FabricCore::Abandon(FabricOp& op) {
  bool waited_already;
  {
    std::lock_guard<std::mutex> lock(op.mu);
    // Once given up (unreleased), the transport owns its context: a second
    // wait for the release would only cost another cancel timeout.
    waited_already = op.reaped || op.unreleased;
  }
  if (!waited_already) CancelAndReap(op, Cancelled(op.Describe() + ": request given up while pending"));
}

void FabricCore::WakeProgress() {
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_wake_ = true;
  }
  progress_cv_.notify_one();
}

std::chrono::microseconds BlockedNapCap(Clock::duration idle_for, std::chrono::microseconds max_sleep) {
  return idle_for < kLongBlockedWait ? std::min(max_sleep, std::chrono::microseconds(100)) : max_sleep;
}

void FabricCore::ProgressLoop() {
  // Short timed sleeps should be short: the default 50 us timer slack would
  // dominate the 1-100 us back-off steps.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  int idle = 0;
  Clock::time_point idle_since = Clock::now();  // the start of the current run of empty polls
  std::unique_lock<std::mutex> lock(progress_mu_);
  while (!progress_stop_) {
    if (spinning_waiters_.load() > 0) {
      // A waiter is driving the CQ itself: stand aside rather than take turns
      // with it for the lock and the cores (on 2 cores, two processes' waiters
      // and progress threads would be four threads polling). It wakes us when
      // it stops spinning to sleep; a waiter that got its completion does not,
      // so look again after a short while.
      progress_cv_.wait_for(lock, options_.progress_max_sleep,
                            [this] { return progress_stop_ || progress_wake_; });
      if (progress_wake_) progress_wake_ = false;
      idle = 0;
      idle_since = Clock::now();
      continue;
    }
    lock.unlock();
    const int handled = Poll(/*block=*/false);
    lock.lock();
    if (handled > 0) {
      idle = 0;
      idle_since = Clock::now();
      continue;
    }
    ++idle;
    if (idle <= 8) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    const auto cap = blocked_waiters_.load() > 0 || backlog_size_.load() > 0
                         ? BlockedNapCap(Clock::now() - idle_since, options_.progress_max_sleep)
                         : options_.progress_max_sleep;
    const auto sleep = std::min(cap, std::chrono::microseconds(int64_t{1} << std::min(idle - 8, 20)));
    progress_cv_.wait_for(lock, sleep, [this] { return progress_stop_ || progress_wake_; });
    if (progress_wake_) {
      progress_wake_ = false;
      idle = 0;
      idle_since = Clock::now();
    }
  }
}

}  // namespace chorus::gossip::fabric
