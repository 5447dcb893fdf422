// ProviderCallClock: how long the provider call now running has been running,
// for FabricCore's wedge watchdog. The calls it times run one at a time (under
// FabricCore's cq_mu_): Enter and Leave each bump a counter, odd while a call
// runs, and Enter notes the peer the call is for. Check, from the watchdog
// thread alone, sees the same odd count as at its previous check when no call
// has ended since, and measures from the check that first saw it. So a call
// is timed to within one check interval, and timing costs the caller two
// stores per call.
//
// Must not: read a clock on the caller's path; include <rdma/...> (a peer is
// the fi_addr_t as a plain uint64_t).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace chorus::gossip::fabric {

class ProviderCallClock {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kNoPeer = ~uint64_t{0};  // FI_ADDR_UNSPEC: a CQ read or cancel

  struct Running {
    Clock::duration elapsed{};  // since the first check that saw the call
    uint64_t peer = kNoPeer;
  };

  // Caller side, one call at a time.
  void Enter(uint64_t peer) {
    peer_.store(peer, std::memory_order_relaxed);
    calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void Leave() { calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // Watchdog side: the call running now, if any.
  std::optional<Running> Check(Clock::time_point now) {
    const uint64_t calls = calls_.load(std::memory_order_acquire);
    if (calls % 2 == 0) {
      seen_ = calls;
      return std::nullopt;
    }
    if (calls != seen_) {
      seen_ = calls;
      seen_since_ = now;
    }
    return Running{now - seen_since_, peer_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> peer_{kNoPeer};
  uint64_t seen_ = 0;  // watchdog thread only
  Clock::time_point seen_since_{};
};

// Times one provider call on `clock` for as long as it lives.
class ProviderCallScope {
 public:
  ProviderCallScope(ProviderCallClock& clock, uint64_t peer) : clock_(clock) { clock_.Enter(peer); }
  ~ProviderCallScope() { clock_.Leave(); }
  ProviderCallScope(const ProviderCallScope&) = delete;
  ProviderCallScope& operator=(const ProviderCallScope&) = delete;

 private:
  ProviderCallClock& clock_;
};

}  // namespace chorus::gossip::fabric
