// FabricCore's watch over shm peers' processes (design in fabric_core.h, "Dead
// peers' locks"): a pidfd watch per peer address, the watchdog thread that
// releases the region locks a killed process left held (once they stay held
// for kLockHeldProof), and the wedge report when a provider call has run past
// FabricOptions::wedged_after while some peer's process has exited. Must not:
// take cq_mu_ or any lock but watch_mu_ (a leaf) and the watchdog's
// progress_mu_ (the thread in a wedged provider call holds cq_mu_ for ever),
// release a live peer's lock (that peer's own watchdog does), or poll a watch
// again once it has seen the exit.
#include "gossip/transport/fabric/fabric_core.h"

#include <unistd.h>

#include <utility>

#include "common/log.h"
#include "common/shm_names.h"
#include "gossip/transport/fabric/shm_region_lock.h"

namespace chorus::gossip::fabric {

std::optional<FabricCore::PeerProcess> FabricCore::WatchProcessOf(const PeerInfo& peer) {
  const std::optional<pid_t> pid = ShmAddressPid(peer.address);
  if (!pid) return std::nullopt;
  Result<ProcessWatch> watch = ProcessWatch::Open(*pid);
  if (watch) return PeerProcess{std::move(*watch), peer.name, ShmRegionName(peer.address)};
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (!std::exchange(watch_unsupported_warned_, true)) {
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot watch the process of ", peer.name, ": ",
                    watch.error().ToString(), "; a send to a peer killed mid-operation may hang");
  }
  return std::nullopt;
}

void FabricCore::InstallWatches(PeerWatches watches) {
  if (watches.empty()) return;
  std::lock_guard<std::mutex> watch_lock(watch_mu_);
  for (auto& [addr, process] : watches) peer_processes_.insert_or_assign(addr, std::move(process));
}

std::vector<FabricCore::ExitedPeer> FabricCore::ExitedPeers() {
  std::vector<ExitedPeer> out;
  std::lock_guard<std::mutex> lock(watch_mu_);
  for (auto& [addr, process] : peer_processes_) {
    if (process.Exited()) out.push_back({process.name, process.watch.pid(), process.region});
  }
  return out;
}

std::optional<Status> FabricCore::WedgedBy(const ProviderCallClock::Running& running) {
  std::string exited;
  for (const ExitedPeer& peer : ExitedPeers()) {
    exited += (exited.empty() ? "" : ", ") + peer.name + " (pid " + std::to_string(peer.pid) + ")";
  }
  if (exited.empty()) return std::nullopt;
  std::string peer_name = "a peer";
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    if (auto it = peer_processes_.find(running.peer); it != peer_processes_.end()) peer_name = it->second.name;
  }
  const std::string call = running.peer == ProviderCallClock::kNoPeer ? "a completion-queue read or cancel"
                                                                       : "a post to or from " + peer_name;
  return Unavailable(describe_ + ": " + call + " has been inside the provider for " + SecondsText(running.elapsed) +
                     " s and the process of " + exited +
                     " has exited: libfabric 1.17's shm spins for ever on a lock that a killed process held (one "
                     "this process cannot release, or not for good), so neither this endpoint nor the thread in "
                     "that call can go on");
}

int FabricCore::ReleaseLocksOfKilledHolders() {
  std::vector<std::pair<std::string, pid_t>> regions;
  for (ExitedPeer& peer : ExitedPeers()) regions.emplace_back(std::move(peer.region), peer.pid);
  if (regions.empty()) return 0;
  regions.emplace_back(ShmRegionName(local_address_), getpid());
  int released = 0;
  for (const auto& [region, creator] : regions) {
    const ShmLockRelease result = ReleaseIfHeldThroughout(region, creator, kLockHeldProof);
    if (result != ShmLockRelease::kReleased && result != ShmLockRelease::kUnknownLayout) continue;
    const std::string whose = creator == getpid() ? "this endpoint's region" : "the region of exited process " +
                                                                                   std::to_string(creator);
    if (result == ShmLockRelease::kReleased) {
      ++released;
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": released the shm lock of ", whose, " (/dev/shm/", region,
                      "): a peer's process has exited and the lock stayed held at every try for ",
                      SecondsText(kLockHeldProof), " s, so the killed process held it");
    } else if (!std::exchange(layout_unknown_warned_, true)) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot release the shm lock of ", whose, " (/dev/shm/", region,
                      ") that a killed process may hold: ", ToString(result));
    }
  }
  return released;
}

void FabricCore::WatchdogLoop() {
  std::unique_lock<std::mutex> lock(progress_mu_);
  while (!progress_stop_) {
    watchdog_cv_.wait_for(lock, kWatchdogInterval, [this] { return progress_stop_; });
    if (progress_stop_) return;
    lock.unlock();
    const int released = ReleaseLocksOfKilledHolders();
    lock.lock();
    if (progress_stop_ || released > 0) continue;  // a stuck call may go on now
    const std::optional<ProviderCallClock::Running> running = call_clock_.Check(Clock::now());
    if (!running || running->elapsed < options_.wedged_after) continue;
    std::optional<Status> wedged = WedgedBy(*running);
    if (!wedged) continue;
    lock.unlock();
    if (options_.on_wedged) {
      options_.on_wedged(*wedged);
    } else {
      CHORUS_LOG_ERROR(Subsys::kFabric, wedged->ToString());
    }
    return;  // once
  }
}

}  // namespace chorus::gossip::fabric
