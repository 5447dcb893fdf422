// node/cluster/: a node's membership in a cluster: its session (data plane and
// control plane), the peers installed per epoch, step agreement after a re-form.
//
// ClusterSession: the data plane and control plane of one node, opened in the
// order docs/design.md gives (fabric endpoint -> control plane join with its address
// -> epoch 0 -> transport peers). Used by `chorus node` and `chorus cluster`.
//
// Must not: train or mix; it only forms the cluster and follows its epochs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gossip/protocols/gossip_tags.h"
#include "gossip/collectives/part_signer.h"
#include "gossip/transport/transport.h"
#include "node/config/config.h"
#include "node/control/control_plane.h"
#include "node/cluster/installed_peers.h"
#include "node/cluster/site_probe.h"
#include "node/control/membership.h"

namespace chorus::node {

// Tags of the collectives a node runs in membership epoch `epoch` outside the
// gossip protocols (the all-reduce exchange's buckets and re-form broadcasts,
// the resume-step agreement): [EpochTagBase(epoch), + 2^40), bit 62 clear.
inline gossip::Tag EpochTagBase(uint64_t epoch) { return (epoch % 1024) << 40; }

// Every tag of EpochTagBase(epoch)'s range: what Transport::Discard drops
// once the epoch has ended.
inline gossip::TagFilter EpochTagFilter(uint64_t epoch) {
  constexpr gossip::Tag kEpochBits = gossip::Tag{0x3ff} << 40;
  return {EpochTagBase(epoch), gossip::kMaxTag & ~(kEpochBits | gossip::kGossipTagBit)};
}

struct ClusterSession {
  std::unique_ptr<gossip::Transport> transport;  // null when opened without a data plane
  std::unique_ptr<ControlPlane> control;
  MembershipView view;
  // The first view this node was a member of came after epoch 0: it joined a
  // running cluster and takes its state from a member (live_state.h).
  bool joined_running = false;
  // The view the transport's peers come from, shared with the control thread
  // (which may already hold a newer view) to mark members dead whose control
  // connection closed.
  std::shared_ptr<InstalledPeers> installed = std::make_shared<InstalledPeers>();
  // The training loop's pacing (PacingOf, node/run/training_loop.h): at its
  // own pace every view is followed on its own, with no collective, and a
  // newer view ends the installed one's operations (InstalledPeers). The
  // exchanges read it; only SetOwnPace sets it.
  bool own_pace() const { return own_pace_; }
  void SetOwnPace() {
    own_pace_ = true;
    installed->SetFollowsViewsOnItsOwn(true);
  }

  // Installs `view`'s members as the transport's peers (Transport::BeginEpoch,
  // then SetPeers). Moving to a later epoch also discards what the epochs left
  // behind (messages of a failed round or collective that no receive will
  // take). Where the transport needs it (shm), waits for every member after
  // BeginEpoch and again after SetPeers (control-plane barriers, by `deadline`).
  // With `site_probe` (exchange.site_probe), and in lock step, the members
  // then measure their links and install the measured sites
  // (site_probe.h) before anything else runs over the view; pairs measured
  // in the last probe are not measured again.
  [[nodiscard]] Status InstallPeers(const MembershipView& view, Deadline deadline);

  // Failures with nobody gone (step_agreement.h): how often this node asked
  // for an epoch over the same members, and how many members it declared
  // dead for not meeting a re-form while they answered heartbeats.
  int reforms_asked = 0;
  int hung_members_declared = 0;

  // With per-node credentials (cluster.issuer): signs and checks the parts
  // of the figures gathered in agreement over the installed view
  // (part_signatures.h); null without credentials. Set by InstallPeers.
  std::shared_ptr<const gossip::PartSigner> part_signer;

  std::optional<SiteProbeOptions> site_probe;
  // The last probe (SiteProbeJson); null before one.
  nlohmann::json site_probe_report;

 private:
  bool own_pace_ = false;
  // Measures the members' links (those not known from the last probe) and
  // installs the measured sites in `view` and the transport.
  [[nodiscard]] Status MeasureSites(Deadline deadline);
  KnownLinks known_links_;  // the last probe that ended here
  // A control-plane barrier of the current epoch, its error naming `name`.
  [[nodiscard]] Status DataPlaneBarrier(const std::string& name, uint64_t epoch, Deadline deadline);
};

// Opens the fabric endpoint (when `with_fabric`), starts the control plane,
// waits for epoch 0 (cluster.join_timeout_s) and installs the transport peers.
// `resume`: the node resumes from its checkpoint (LocalNodeInfo::resume).
// A data plane that wedges (FabricOptions::on_wedged: a thread stuck for ever
// inside the provider) makes the process log why and exit with status 1 after
// `before_exit` (flush the logs): its control connections close, and the
// other members go on without it at once. kCancelled, and only then: the
// cluster ended its run before admitting this node (RunEndedBeforeAdmission).
// `on_formed` runs the moment this node first holds a view, before that view
// is logged and before the peers are installed (LocalNodeInfo::on_member):
// where a stop request means "leave" from then on (`chorus cluster`).
[[nodiscard]] Result<ClusterSession> JoinCluster(const Config& config, bool with_fabric, bool resume = false,
                                                 std::function<void()> before_exit = {},
                                                 const std::function<void()>& on_formed = {});

// A JoinCluster failure that says the cluster's run is over: this node's job
// is done without it training anything.
inline bool RunEndedBeforeAdmission(const Status& join_failure) {
  return join_failure.code() == StatusCode::kCancelled;
}

}  // namespace chorus::node
