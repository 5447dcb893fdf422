// InstalledPeers (see installed_peers.h).
#include "node/cluster/installed_peers.h"

#include <algorithm>

#include "common/log.h"

namespace chorus::node {
namespace {

std::string Key(const Member& m) { return {m.data_address.begin(), m.data_address.end()}; }

std::string SupersededBy(uint64_t epoch) {
  return "epoch " + std::to_string(epoch) + " superseded it";
}

}  // namespace

void InstalledPeers::BeginInstall(const MembershipView& next) {
  std::lock_guard<std::mutex> lock(mu_);
  view_ = next;
  installed_ = false;
}

void InstalledPeers::Installed(gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  installed_ = true;
  std::map<std::string, bool> still_named;
  std::string declared;  // a member of this view declared dead meanwhile
  for (const Member& m : view_.members) {
    auto death = dead_.find(Key(m));
    if (death == dead_.end()) continue;
    still_named.insert(*death);
    if (m.rank != view_.self_rank) MarkDeadLocked(m, transport, "before this epoch was installed");
    if (death->second) declared = m.name;
  }
  dead_ = std::move(still_named);
  if (!declared.empty()) {
    EndEpochLocked(transport, declared + " was declared dead while it was installed");
  } else if (NewerViewEndsEpochLocked() && latest_epoch_ > view_.epoch) {
    EndSupersededEpochLocked(transport, latest_epoch_);
  }
}

void InstalledPeers::SetRecovery(Recovery recovery) {
  std::lock_guard<std::mutex> lock(mu_);
  recovery_ = recovery;
}

void InstalledPeers::SetFollowsViewsOnItsOwn(bool own_pace) {
  std::lock_guard<std::mutex> lock(mu_);
  own_pace_ = own_pace;
}

void InstalledPeers::ViewChanged(const MembershipView& latest, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_epoch_ = std::max(latest_epoch_, latest.epoch);
  if (latest.reform) reform_epoch_ = std::max(reform_epoch_, latest.epoch);
  if (!installed_ || latest.epoch <= view_.epoch) return;
  if (latest.self_rank < 0) {
    // This node is out (removed, or it left): no member of the installed
    // epoch waits for it any more, so nothing it waits for will come. A
    // node frozen while the members attached shared memory waited there to
    // its deadline after it learned it was removed, and rejoined that late.
    EndEpochLocked(transport, "this node is no member of epoch " + std::to_string(latest.epoch),
                   /*short_wait=*/true);
  } else if (NewerViewEndsEpochLocked()) {
    EndSupersededEpochLocked(transport, latest.epoch);
  }
}

void InstalledPeers::EndSupersededEpochLocked(gossip::Transport& transport, uint64_t latest) {
  // At its own pace every member moved on to the newer epoch and ended this
  // one's operations too: a message in flight between two of them will not
  // complete, and waiting the cancel timeout for its release would pause
  // this node at every join. The short wait of a silent peer's, then its
  // buffer is kept.
  EndEpochLocked(transport, SupersededBy(latest), /*short_wait=*/own_pace_ && recovery_ == Recovery::kTraining);
}

const Member* InstalledPeers::RecordDeathLocked(const std::string& name, bool declared) {
  const Member* m = view_.Find(name);
  if (m == nullptr || m->rank == view_.self_rank) return nullptr;
  dead_[Key(*m)] |= declared;
  return m;
}

void InstalledPeers::MemberDead(const MemberFailure& failure, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  const Member* m = RecordDeathLocked(failure.name, /*declared=*/true);
  if (m != nullptr && installed_ && recovery_ == Recovery::kTraining) {
    const char* how = failure.kind == MemberFailure::Kind::kStopped ? "stopped before the end of its run"
                                                                     : "was declared dead";
    EndEpochLocked(transport, failure.name + " (rank " + std::to_string(m->rank) + ") " + how);
    if (failure.kind == MemberFailure::Kind::kDeclaredDead) transport.PeerSilent(m->rank);
  }
  if (m != nullptr && installed_ && failure.gone) transport.PeerGone(m->rank);
}

void InstalledPeers::EndEpochLocked(gossip::Transport& transport, const std::string& why, bool short_wait) {
  CHORUS_LOG_WARN(Subsys::kFabric, "ending epoch ", view_.epoch, "'s data-plane operations: ", why);
  for (const Member& m : view_.members) {
    if (m.rank == view_.self_rank) continue;
    transport.MarkPeerDead(m.rank);
    if (short_wait) transport.PeerSilent(m.rank);
  }
}

void InstalledPeers::ConnectionLost(const std::string& name, gossip::Transport& transport) {
  std::lock_guard<std::mutex> lock(mu_);
  const Member* m = RecordDeathLocked(name, /*declared=*/false);
  if (m == nullptr) return;
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
