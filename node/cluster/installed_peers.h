// InstalledPeers: which membership view the transport's peers come from, and
// which members have failed, so that the data plane fails operations with a
// dead member at once rather than at their deadline.
//
// A member whose control connection closes has (almost always) died. The
// control thread reports it at any time, also while ClusterSession moves the
// transport to a new epoch (BeginEpoch, barriers, SetPeers): then the rank the
// death should be marked under is not settled, and over shm the endpoint that
// would take the mark has no peers yet. So a death is kept by the member's
// data address and marked under its rank of every view installed afterwards
// that still names it.
//
// A member declared dead ends the installed epoch for every survivor: its
// collectives cannot complete any more, and a survivor that waits only for
// live members (in a ring, for the neighbour that itself stopped at the
// failure) would otherwise wait to its deadline (fabric.op_timeout_s, 30 s)
// before it re-formed, while the others' re-form waited for it.
//
// Must not: decide membership (the control plane does); it only relays what
// the control plane saw to the transport.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "gossip/transport/transport.h"
#include "node/control/membership.h"

namespace chorus::node {

class InstalledPeers {
 public:
  // The transport is moving to `next`: until Installed(), deaths are kept, not
  // marked (the old peers' ranks no longer apply, the new ones do not yet).
  void BeginInstall(const MembershipView& next);
  // `transport`'s peers are `next`'s members now: marks the deaths seen so
  // far among them, and forgets those of processes no longer in the view.
  void Installed(gossip::Transport& transport);
  // From the control thread: `name`'s control connection closed. Its rank is
  // marked dead (no new operations with it; rxm 1.17 crashed on a receive
  // posted to a peer whose connection it was tearing down).
  void ConnectionLost(const std::string& name, gossip::Transport& transport);
  // From the control thread: `failure.name` was declared dead (kDeclaredDead)
  // or stopped before its run's end (kStopped). Every other member of the
  // installed view is marked dead, or, while a view is being installed, once
  // it is if it still names `failure.name`.
  // Not while this node recovers (Recovery below): its operations of that
  // epoch have ended already, and marking live peers from the control thread
  // while the main thread tears its protocol down crashed rxm 1.17 (a call
  // through a null pointer in 1 of about 10 D-PSGD kill runs).
  // `failure.gone`: its requests not released by the provider are given up at
  // once (Transport::PeerGone), in any recovery state, once its rank is
  // marked dead.
  void MemberDead(const MemberFailure& failure, gossip::Transport& transport);

  // Where this node is, set by ReformOverSurvivors. While a re-form attempt
  // runs (kReforming), a view newer than the one it installs ends the
  // attempt: the members of the installed view are marked dead, so that the
  // attempt's collectives fail at once rather than wait to their deadline for
  // members that have moved on to the newer epoch. While training a newer
  // view changes nothing here (a join's view arrives at the epoch boundary,
  // and the training loop installs it).
  enum class Recovery {
    kTraining,  // no failure being handled
    kWaiting,   // an operation failed; waiting for the next epoch
    kReforming  // installing an epoch's peers and agreeing on the step
  };
  void SetRecovery(Recovery recovery);
  // Nodes at their own pace follow each new view between their steps, with
  // no barrier (ControlPlane::AdmitOnItsOwn): while training, a newer view
  // than the installed one ends the installed epoch's operations too, so
  // that none waits for a peer that has moved on to the newer epoch.
  void SetFollowsViewsOnItsOwn(bool own_pace);
  // From the control thread: the control plane installed `latest`. One
  // without this node (self_rank -1: removed, or it left) ends the installed
  // epoch's operations with every member, whatever the recovery; one a
  // member asked for over the same members (latest.reform) ends them while
  // training: that member's exchange failed, and the others' would wait for
  // it to their deadline.
  void ViewChanged(const MembershipView& latest, gossip::Transport& transport);

 private:
  // Keeps `name`'s death (by data address); its member in view_, or nullptr
  // when view_ does not name it or it is this node.
  const Member* RecordDeathLocked(const std::string& name, bool declared);
  void MarkDeadLocked(const Member& member, gossip::Transport& transport, const char* when);
  // Ends view_'s data-plane operations (`why`): marks every other member
  // dead, with `short_wait` also silent (Transport::PeerSilent).
  void EndEpochLocked(gossip::Transport& transport, const std::string& why, bool short_wait = false);
  // EndEpochLocked for a newer view (`latest`); at its own pace while
  // training, what the provider has not released is given up after a
  // silent peer's short wait (Transport::PeerSilent), not the cancel
  // timeout: the members are alive, and a join must pause nobody.
  void EndSupersededEpochLocked(gossip::Transport& transport, uint64_t latest);

  std::mutex mu_;  // held while marking, so a mark never meets a renumbering
  MembershipView view_;
  bool installed_ = false;
  Recovery recovery_ = Recovery::kTraining;
  bool own_pace_ = false;
  // Whether a view newer than the installed one ends its operations now: in
  // a re-form attempt; while training, at its own pace, or when a member
  // asked for a view newer than the installed one (reform_epoch_).
  bool NewerViewEndsEpochLocked() const {
    return recovery_ == Recovery::kReforming ||
           (recovery_ == Recovery::kTraining && (own_pace_ || reform_epoch_ > view_.epoch));
  }
  uint64_t latest_epoch_ = 0;  // the newest view the control plane has installed
  // The newest view a member asked for over the same members
  // (MembershipView::reform): while training, it ends the installed epoch's
  // operations as a death does, also once a view being installed when it
  // came is (Installed).
  uint64_t reform_epoch_ = 0;
  // Deaths by data address (unique per process, as bytes): true once declared
  // dead (MemberDead), false while only the connection was lost.
  std::map<std::string, bool> dead_;
};

}  // namespace chorus::node
