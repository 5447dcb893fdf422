// FabricCore discard filters (design in fabric_core.h, "Discard filters"):
// Transport::Discard, the sweeps Poll runs while a filter is set (one
// fi_trecvmsg(FI_PEEK) from any source per filter with nothing in flight,
// backing off from kDiscardSweep to kDiscardSweepMax), and the drain that
// receives what a peek found into a buffer of its own. Must not: use
// FI_DISCARD (on some providers only a real receive releases the sender), peek
// on shm (it never completes a peek), take a first-contact message (its
// receive is SetPeers'), or count peeks and drains as progress.
#include "gossip/transport/fabric/fabric_core.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace chorus::gossip::fabric {

void FabricCore::Discard(TagFilter filter) {
  if (!options_.endpoint_name.empty()) return;  // opened for an epoch: nothing of earlier ones reaches it
  std::lock_guard<std::mutex> lock(discard_mu_);
  if (!discard_unsupported_.empty()) {
    if (!discard_warned_) {
      discard_warned_ = true;
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot drop the messages a failed epoch left behind: ",
                      discard_unsupported_);
    }
    return;
  }
  DiscardFilter added;
  added.filter = filter;
  discard_filters_.push_back(std::move(added));
  // A dropped filter's peek in flight stays owned by inflight_ until reaped.
  if (discard_filters_.size() > kMaxDiscardFilters) discard_filters_.pop_front();
  SweepSoon();
  discarding_.store(true);
  WakeProgress();
}

void FabricCore::SweepSoon() {
  sweep_interval_ns_.store(Nanos(kDiscardSweep));
  next_sweep_ns_.store(0);
}

void FabricCore::SweepDiscardsWhenDue() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (now < next_sweep_ns_.load(std::memory_order_relaxed)) return;
  // Sweeps that find nothing back off (x2 up to kDiscardSweepMax): the
  // filters stay on for late arrivals at a cost of a few peeks a second.
  const int64_t interval = sweep_interval_ns_.load(std::memory_order_relaxed);
  next_sweep_ns_.store(now + interval);
  sweep_interval_ns_.store(std::min<int64_t>(2 * interval, Nanos(kDiscardSweepMax)));
  SweepDiscards();
}

void FabricCore::SweepDiscards() {
  std::lock_guard<std::mutex> lock(discard_mu_);
  for (DiscardFilter& filter : discard_filters_) {
    if (filter.stopped) continue;
    const auto& peek = filter.peek;
    if (peek && (!peek->finished.load() || (peek->drain && !peek->drain->finished.load()))) continue;
    auto op = NewOp(FabricOp::Kind::kPeek, filter.filter.tag);
    op->peer_name = "any source";
    op->ignore = filter.filter.ignore;
    Track(op);
    fi_msg_tagged msg{};
    msg.addr = FI_ADDR_UNSPEC;
    msg.tag = filter.filter.tag;
    msg.ignore = filter.filter.ignore;
    msg.context = &op->ctx.context;
    const ssize_t ret =
        InProvider(ProviderCallClock::kNoPeer, [&] { return fi_trecvmsg(ep_.get(), &msg, FI_PEEK | FI_COMPLETION); });
    if (ret == 0) {
      filter.peek = std::move(op);
      continue;
    }
    Untrack(*op);
    if (ret == -FI_EAGAIN) return;  // queue full: next sweep
    discard_unsupported_ = FabricStatus(static_cast<int>(ret), "fi_trecvmsg(FI_PEEK)")
                               .WithContext(op->Describe())
                               .ToString();
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", discard_unsupported_, "; unreceived messages stay queued");
    discard_warned_ = true;
    discard_filters_.clear();
    discarding_.store(false);
    return;
  }
}

void FabricCore::StartDrain(FabricOp& peek, const fi_cq_tagged_entry& entry) {
  if (options_.provider == FabricProvider::kTcpRxm && entry.len > kRxmEagerBytes) {
    DrainFromLivePeers(peek, entry);
    return;
  }
  // From any source, with the peeked message's exact tag: no message before it
  // in the provider's unexpected queue matched the filter, so this receive
  // takes the one the peek found. Not from the peek's source: tcp;ofi_rxm
  // reports a wrong source for peeked messages (docs/libfabric.md,
  // "`tcp;ofi_rxm`": "Peek source").
  auto op = NewOwnedOp(FabricOp::Kind::kDrain, entry.tag, FI_ADDR_UNSPEC, "any source",
                       std::max<size_t>(entry.len, 1));
  if (!op) {
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", op.error().ToString());
    return;
  }
  if (TryPost(**op) != 0) {  // the next sweep peeks again
    Untrack(**op);
    return;
  }
  peek.drain = std::move(*op);
}

void FabricCore::DrainFromLivePeers(FabricOp& peek, const fi_cq_tagged_entry& entry) {
  std::vector<std::pair<fi_addr_t, std::string>> live;
  {
    std::shared_lock lock(peers_mu_);
    for (Rank r = 0; r < static_cast<Rank>(peers_.addr.size()); ++r) {
      if (r != peers_.self && !peers_.dead[r]) live.emplace_back(peers_.addr[r], peers_.Name(r));
    }
  }
  std::lock_guard<std::mutex> lock(discard_mu_);
  auto filter = std::find_if(discard_filters_.begin(), discard_filters_.end(),
                             [&](const DiscardFilter& f) { return f.peek.get() == &peek; });
  if (filter == discard_filters_.end()) return;  // a dropped filter's peek
  if (std::find(filter->tags_by_source.begin(), filter->tags_by_source.end(), entry.tag) !=
      filter->tags_by_source.end()) {
    filter->stopped = true;
    CHORUS_LOG_INFO(Subsys::kFabric, describe_, ": left a dead peer's unreceived message of tag ", entry.tag, " (",
                    entry.len, " bytes) queued (tcp;ofi_rxm cannot receive a dead peer's rendezvous); "
                    "the filter stops sweeping");
    return;
  }
  filter->tags_by_source.push_back(entry.tag);
  for (const auto& [addr, name] : live) {
    auto op = NewOwnedOp(FabricOp::Kind::kDrain, entry.tag, addr, name, entry.len);
    if (!op) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", op.error().ToString());
      continue;
    }
    if (TryPost(**op) != 0) Untrack(**op);
  }
}

}  // namespace chorus::gossip::fabric
