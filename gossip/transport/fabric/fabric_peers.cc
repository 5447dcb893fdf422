// FabricCore membership (design in fabric_core.h): SetPeers as named steps
// (AV insertion of addresses not seen before, the self check, the first-contact
// plan, pending operations following their peer to its new rank), and the
// death or departure of a peer (MarkPeerDead, PeerGone) with the operations
// they fail or cut short. Must not: call into the provider's data path while
// holding peers_mu_ (Poll takes cq_mu_ before peers_mu_), or wait for cq_mu_
// (the caller may be the control thread: cancels go through CancelInProvider).
#include "gossip/transport/fabric/fabric_core.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace chorus::gossip::fabric {

namespace {

// A table of `n` ranks with no address yet.
PeerTable EmptyPeerTable(Rank self, int n) {
  PeerTable table;
  table.self = self;
  table.addr.assign(n, FI_ADDR_NOTAVAIL);
  table.names.resize(n);
  table.dead.assign(n, false);
  table.other_site.assign(n, false);
  return table;
}

// `self` is one of `peers` and has this endpoint's address.
Status CheckSelf(Rank self, std::span<const PeerInfo> peers, const std::vector<uint8_t>& local_address) {
  const int n = static_cast<int>(peers.size());
  if (self < 0 || self >= n || peers.empty()) {
    return InvalidArgument("fabric SetPeers: self rank " + std::to_string(self) +
                           " not among the " + std::to_string(n) + " peers");
  }
  for (const PeerInfo& p : peers) {
    if (p.rank == self && p.address != local_address) {
      return InvalidArgument("fabric SetPeers: self rank " + std::to_string(self) + " (" +
                             p.name + ") has another endpoint's address");
    }
  }
  return Status::Ok();
}

}  // namespace

Status FabricCore::SetPeers(Rank self, std::span<const PeerInfo> peers) {
  PeerTable table = EmptyPeerTable(self, static_cast<int>(peers.size()));
  PeerWatches watches;
  std::unique_lock lock(peers_mu_);
  CHORUS_RETURN_IF_ERROR(AddPeersLocked(peers, table, watches));
  CHORUS_RETURN_IF_ERROR(CheckSelf(self, peers, local_address_));
  const FirstContacts contacts = order_first_contact_ ? PlanFirstContacts(peers, table) : FirstContacts{};
  peers_ = std::move(table);
  const std::vector<std::shared_ptr<FabricOp>> gone = FollowPeersLocked();
  lock.unlock();  // Poll takes cq_mu_ before peers_mu_: never hold both the other way
  InstallWatches(std::move(watches));
  CancelInProvider(gone);
  StartFirstContacts(contacts);
  return Status::Ok();
}

Status FabricCore::AddPeersLocked(std::span<const PeerInfo> peers, PeerTable& table, PeerWatches& watches) {
  const int n = static_cast<int>(peers.size());
  for (const PeerInfo& p : peers) {
    if (p.rank < 0 || p.rank >= n || table.addr[p.rank] != FI_ADDR_NOTAVAIL) {
      return InvalidArgument("fabric SetPeers: rank " + std::to_string(p.rank) +
                             " is out of range or repeated (" + std::to_string(n) + " peers)");
    }
    if (p.address.empty()) {
      return InvalidArgument("fabric SetPeers: rank " + std::to_string(p.rank) + " (" + p.name +
                             ") has an empty address");
    }
    CHORUS_ASSIGN_OR_RETURN(const fi_addr_t addr, AvAddressLocked(p, watches));
    table.addr[p.rank] = addr;
    table.names[p.rank] = p.name;
    table.other_site[p.rank] = p.other_site;
    table.rank_of[addr] = p.rank;
  }
  return Status::Ok();
}

Result<fi_addr_t> FabricCore::AvAddressLocked(const PeerInfo& peer, PeerWatches& watches) {
  const std::string key(peer.address.begin(), peer.address.end());
  if (auto it = av_entries_.find(key); it != av_entries_.end()) return it->second;
  std::vector<uint8_t> blob = peer.address;
  if (info_->addr_format == FI_ADDR_STR && blob.back() != 0) blob.push_back(0);
  fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
  const int ret = fi_av_insert(av_.get(), blob.data(), 1, &fi_addr, 0, nullptr);
  if (ret != 1 || fi_addr == FI_ADDR_NOTAVAIL) {
    return Err(FabricStatus(ret < 0 ? ret : -FI_EADDRNOTAVAIL,
                            "fi_av_insert for rank " + std::to_string(peer.rank) + " (" + peer.name + ")"));
  }
  av_entries_.emplace(key, fi_addr);
  if (watches_peer_processes_ && peer.address != local_address_) {
    if (std::optional<PeerProcess> process = WatchProcessOf(peer)) watches.emplace_back(fi_addr, std::move(*process));
  }
  return fi_addr;
}

std::vector<std::shared_ptr<FabricOp>> FabricCore::FollowPeersLocked() {
  std::vector<std::shared_ptr<FabricOp>> gone;
  std::lock_guard<std::mutex> inflight_lock(inflight_mu_);
  for (auto& [ptr, op] : inflight_) {
    if (op->addr == FI_ADDR_UNSPEC) continue;
    auto r = peers_.rank_of.find(op->addr);
    std::lock_guard<std::mutex> op_lock(op->mu);
    if (r == peers_.rank_of.end()) {
      FailLocked(*op, Unavailable(op->Describe() + ": peer left the membership"));
      gone.push_back(op);
    } else {
      op->peer = r->second;
    }
  }
  return gone;
}

bool FabricCore::PeerMarkedDead(Rank peer) const {
  std::shared_lock lock(peers_mu_);
  return peer >= 0 && peer < static_cast<Rank>(peers_.dead.size()) && peers_.dead[peer];
}

void FabricCore::MarkPeerDead(Rank peer) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  std::string name;
  {
    std::unique_lock lock(peers_mu_);
    if (peer < 0 || peer >= static_cast<Rank>(peers_.addr.size())) return;
    peers_.dead[peer] = true;
    addr = peers_.addr[peer];
    name = peers_.Name(peer);
  }
  std::vector<std::shared_ptr<FabricOp>> failed = CancelledWith(addr, Clock::now(), /*fail=*/true);
  // Receives are cancelled (their FI_ECANCELED completions are reaped by the
  // progress thread); a send the provider already started completes or fails
  // on its own, and its context stays owned by inflight_ until then.
  CancelInProvider(failed);
  DropGate(addr, "peer marked dead");
  CHORUS_LOG_INFO(Subsys::kFabric, describe_, ": ", name, " marked dead, ", failed.size(),
                  " pending operations failed");
}

void FabricCore::PeerSilent(Rank peer) {
  ReleaseWaitLeft(peer, std::min<Clock::duration>(options_.dead_peer_release_wait, options_.cancel_timeout));
}

void FabricCore::PeerGone(Rank peer) { ReleaseWaitLeft(peer, Clock::duration::zero()); }

void FabricCore::ReleaseWaitLeft(Rank peer, Clock::duration wait) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  {
    std::shared_lock lock(peers_mu_);
    if (peer < 0 || peer >= static_cast<Rank>(peers_.addr.size()) || !peers_.dead[peer]) return;
    addr = peers_.addr[peer];
  }
  CancelledWith(addr, Clock::now() - (options_.cancel_timeout - wait), /*fail=*/false);
}

std::vector<std::shared_ptr<FabricOp>> FabricCore::CancelledWith(fi_addr_t addr, Clock::time_point at, bool fail) {
  std::vector<std::shared_ptr<FabricOp>> ops;
  std::lock_guard<std::mutex> lock(inflight_mu_);
  for (auto& [ptr, op] : inflight_) {
    if (op->addr != addr) continue;
    std::lock_guard<std::mutex> op_lock(op->mu);
    if (fail) FailLocked(*op, Unavailable(op->Describe() + ": peer marked dead"));
    if (op->cancelled_at == Clock::time_point{} || op->cancelled_at > at) op->cancelled_at = at;
    ops.push_back(op);
  }
  return ops;
}

}  // namespace chorus::gossip::fabric
