// InstalledPeers: which membership view the transport's peers come from, and
// which members' control connections have closed, so that the data plane
// fails operations with a dead member at once rather than at their deadline.
//
// A member whose control connection closes has (almost always) died. The
// control thread reports it at any time, also while ClusterSession moves the
// transport to a new epoch (BeginEpoch, barriers, SetPeers): then the rank the
// death should be marked under is not settled, and over shm the endpoint that
// would take the mark has no peers yet. So a death is kept by the member's
// data address and marked under its rank of every view installed afterwards
// that still names it.
//
// Must not: decide membership (the control plane does); it only relays what
// the control plane saw to the transport.
#pragma once

#include <mutex>
#include <set>
#include <string>

#include "gossip/transport.h"
#include "node/membership.h"

namespace chorus::node {

class InstalledPeers {
 public:
  // The transport is moving to `next`: until Installed(), deaths are kept, not
  // marked (the old peers' ranks no longer apply, the new ones do not yet).
  void BeginInstall(const MembershipView& next);
  // `transport`'s peers are `next`'s members now: marks the deaths seen so
  // far among them, and forgets those of processes no longer in the view.
  void Installed(gossip::Transport& transport);
  // From the control thread: `name`'s control connection closed.
  void ConnectionLost(const std::string& name, gossip::Transport& transport);

  // While a re-form attempt runs (ReformOverSurvivors), a view newer than the
  // one it installs ends the attempt: the members of the installed view are marked
  // dead, so that the attempt's collectives fail at once rather than wait to
  // their deadline for members that have moved on to the newer epoch. Outside
  // a re-form a newer view changes nothing here (a join's view arrives at the
  // epoch boundary, and the training loop installs it).
  void SetReforming(bool reforming);
  // From the control thread: the control plane installed `latest`.
  void ViewChanged(const MembershipView& latest, gossip::Transport& transport);

 private:
  void MarkDeadLocked(const Member& member, gossip::Transport& transport, const char* when);
  // A re-form at view_ is superseded: marks every other member dead.
  void EndSupersededLocked(gossip::Transport& transport);

  std::mutex mu_;  // held while marking, so a mark never meets a renumbering
  MembershipView view_;
  bool installed_ = false;
  bool reforming_ = false;
  uint64_t latest_epoch_ = 0;  // the newest view the control plane has installed
  std::set<std::string> dead_;  // data addresses (unique per process), as bytes
};

}  // namespace chorus::node
