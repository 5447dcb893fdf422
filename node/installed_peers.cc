// InstalledPeers (see installed_peers.h).
#include "node/installed_peers.h"

#include <algorithm>

#include "common/log.h"

namespace chorus::node {
namespace {

std::string Key(const Member& m) { return {m.data_address.begin(), m.data_address.end()}; }

}  // namespace

void InstalledPeers::BeginInstall(const MembershipView& next) {
  std::lock_guard<std::mutex> lock(mu_);
  view_ = next;
  installed_ = false;
}

void InstalledPeers::Installed(gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  installed_ = true;
  std::set<std::string> still_named;
  std::string declared;  // a member of this view declared dead meanwhile
  for (const Member& m : view_.members) {
    if (!dead_.contains(Key(m))) continue;
    still_named.insert(Key(m));
    if (m.rank != view_.self_rank) MarkDeadLocked(m, transport, "before this epoch was installed");
    if (declared_.contains(Key(m))) declared = m.name;
  }
  std::erase_if(declared_, [&](const std::string& key) { return !still_named.contains(key); });
  dead_ = std::move(still_named);
  if (!declared.empty()) {
    EndEpochLocked(transport, declared + " was declared dead while it was installed");
  } else if (reforming_ && latest_epoch_ > view_.epoch) {
    EndEpochLocked(transport, "epoch " + std::to_string(latest_epoch_) + " superseded it during the re-form");
  }
}

void InstalledPeers::SetRecovering(bool recovering) {
  std::lock_guard<std::mutex> lock(mu_);
  recovering_ = recovering;
}

void InstalledPeers::SetReforming(bool reforming) {
  std::lock_guard<std::mutex> lock(mu_);
  reforming_ = reforming;
}

void InstalledPeers::ViewChanged(const MembershipView& latest, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_epoch_ = std::max(latest_epoch_, latest.epoch);
  if (reforming_ && installed_ && latest.epoch > view_.epoch) {
    EndEpochLocked(transport, "epoch " + std::to_string(latest.epoch) + " superseded it during the re-form");
  }
}

void InstalledPeers::MemberDead(const std::string& name, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  const Member* m = view_.Find(name);
  if (m == nullptr || m->rank == view_.self_rank) return;
  dead_.insert(Key(*m));
  declared_.insert(Key(*m));
  if (installed_ && !recovering_) EndEpochLocked(transport, name + " (rank " + std::to_string(m->rank) + ") was declared dead");
}

void InstalledPeers::EndEpochLocked(gossip::Transport& transport, const std::string& why) {
  CHORUS_LOG_WARN(Subsys::kFabric, "ending epoch ", view_.epoch, "'s data-plane operations: ", why);
  for (const Member& m : view_.members) {
    if (m.rank != view_.self_rank) transport.MarkPeerDead(m.rank);
  }
}

void InstalledPeers::ConnectionLost(const std::string& name, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  const Member* m = view_.Find(name);
  if (m == nullptr || m->rank == view_.self_rank) return;
  dead_.insert(Key(*m));
  if (installed_) {
    MarkDeadLocked(*m, transport, "");
  } else {
    CHORUS_LOG_WARN(Subsys::kFabric, name, "'s control connection closed while epoch ", view_.epoch,
                    " is being installed: it is marked dead on the data plane once it is");
  }
}

void InstalledPeers::MarkDeadLocked(const Member& member, gossip::Transport& transport, const char* when) {
  CHORUS_LOG_WARN(Subsys::kFabric, "marking ", member.name, " (rank ", member.rank, " of epoch ", view_.epoch,
                  ") dead on the data plane: its control connection closed", *when ? " " : "", when);
  transport.MarkPeerDead(member.rank);
}

}  // namespace chorus::node
