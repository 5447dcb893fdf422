// ClusterSession: the data plane and control plane of one node, opened in the
// order DESIGN.md gives (fabric endpoint -> control plane join with its address
// -> epoch 0 -> transport peers). Used by `chorus node` and `chorus cluster`.
//
// Must not: train or mix; it only forms the cluster and follows its epochs.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "gossip/transport.h"
#include "node/config.h"
#include "node/control_plane.h"
#include "node/membership.h"

namespace chorus::node {

// The view whose members are the transport's peers right now, shared with the
// control thread (which may already hold a newer view).
struct InstalledView {
  std::mutex mu;
  MembershipView view;
};

struct ClusterSession {
  std::unique_ptr<gossip::Transport> transport;  // null when opened without a data plane
  std::unique_ptr<ControlPlane> control;
  MembershipView view;
  std::shared_ptr<InstalledView> installed = std::make_shared<InstalledView>();

  // Installs `view`'s members as the transport's peers.
  [[nodiscard]] Status InstallPeers(const MembershipView& view);
};

// Opens the fabric endpoint (when `with_fabric`), starts the control plane,
// waits for epoch 0 (cluster.join_timeout_s) and installs the transport peers.
[[nodiscard]] Result<ClusterSession> JoinCluster(const Config& config, bool with_fabric);

}  // namespace chorus::node
