// FabricCore first contact, net only (design in fabric_core.h, "First
// contact"): which end of each new pair sends the first-contact message
// (address order, so both ends agree whatever their ranks), the gates that
// hold sends to a peer until its message arrives or kFirstContactWait passes,
// and opening or dropping them. Must not: hold a receive behind a gate, take
// contact_mu_ after backlog_mu_ or cq_mu_ (lock order: peers_mu_, contact_mu_,
// backlog_mu_, cq_mu_), or wait for contact_mu_ from Poll (OpenGates tries it
// and leaves the arrivals to the next Poll).
#include "gossip/transport/fabric/fabric_core.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace chorus::gossip::fabric {

FabricCore::FirstContacts FabricCore::PlanFirstContacts(std::span<const PeerInfo> peers, const PeerTable& table) {
  // First contact with peers never named before, decided by address order
  // so both ends agree whatever their ranks; gates of peers that left go.
  FirstContacts plan;
  const std::string own(local_address_.begin(), local_address_.end());
  std::lock_guard<std::mutex> contact_lock(contact_mu_);
  for (const PeerInfo& p : peers) {
    const std::string key(p.address.begin(), p.address.end());
    if (p.rank == table.self || !contacted_.insert(key).second) continue;
    const fi_addr_t addr = table.addr[p.rank];
    if (own < key) {
      plan.send_to.emplace_back(addr, table.Name(p.rank));
    } else {
      gates_[addr] = Gate{{}, Clock::now() + kFirstContactWait, table.Name(p.rank)};
      plan.await_from.emplace_back(addr, table.Name(p.rank));
    }
  }
  for (const auto& [addr, gate] : gates_) {
    if (!table.rank_of.contains(addr)) plan.left_gates.push_back(addr);
  }
  gates_count_.store(static_cast<int>(gates_.size()));
  return plan;
}

void FabricCore::StartFirstContacts(const FirstContacts& plan) {
  for (fi_addr_t addr : plan.left_gates) DropGate(addr, "peer left the membership");
  auto post = [this](FabricOp::Kind kind, fi_addr_t addr, const std::string& name) {
    auto op = NewOwnedOp(kind, kReservedTag, addr, name, sizeof(uint64_t));
    const Status status = op ? Submit(*op) : op.error();
    if (!status.ok()) {
      // Its gate then opens when its wait runs out: sends go unordered.
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", status.ToString());
    }
  };
  for (const auto& [addr, name] : plan.send_to) post(FabricOp::Kind::kContactSend, addr, name);
  for (const auto& [addr, name] : plan.await_from) post(FabricOp::Kind::kContactRecv, addr, name);
}

void FabricCore::NoteContactArrived(fi_addr_t addr) {
  std::lock_guard<std::mutex> lock(opened_mu_);
  opened_.push_back(addr);
}

void FabricCore::DropGate(fi_addr_t addr, const std::string& why) {
  if (gates_count_.load() == 0) return;
  std::deque<std::shared_ptr<FabricOp>> held;
  {
    std::lock_guard<std::mutex> lock(contact_mu_);
    auto gate = gates_.find(addr);
    if (gate == gates_.end()) return;
    held.swap(gate->second.held);
    gates_.erase(gate);
    gates_count_.store(static_cast<int>(gates_.size()));
    for (auto& op : held) op->gated = false;
  }
  for (auto& op : held) Finish(*op, Unavailable(op->Describe() + ": " + why), {}, /*reaped=*/true);
}

void FabricCore::OpenGates() {
  std::vector<fi_addr_t> arrived;
  {
    std::lock_guard<std::mutex> lock(opened_mu_);
    arrived.swap(opened_);
  }
  std::unique_lock<std::mutex> lock(contact_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {  // the next Poll looks again
    std::lock_guard<std::mutex> opened_lock(opened_mu_);
    opened_.insert(opened_.end(), arrived.begin(), arrived.end());
    return;
  }
  const auto now = Clock::now();
  std::vector<std::pair<std::shared_ptr<FabricOp>, Status>> failed;
  for (auto gate = gates_.begin(); gate != gates_.end();) {
    const bool came = std::find(arrived.begin(), arrived.end(), gate->first) != arrived.end();
    if (!came && now < gate->second.expires) {
      ++gate;
      continue;
    }
    if (!came) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": no first-contact message from ",
                      gate->second.peer_name, " in ", kFirstContactWait.count(),
                      " s; sending to it anyway");
    }
    for (auto& op : gate->second.held) {
      op->gated = false;
      if (op->finished.load()) {
        failed.emplace_back(op, Cancelled(op->Describe() + ": finished before it was posted"));
        continue;
      }
      Status status = Submit(op);
      if (!status.ok()) failed.emplace_back(op, std::move(status));
    }
    gate = gates_.erase(gate);
  }
  gates_count_.store(static_cast<int>(gates_.size()));
  lock.unlock();
  for (auto& [op, status] : failed) Finish(*op, std::move(status), {}, /*reaped=*/true);
}

}  // namespace chorus::gossip::fabric
