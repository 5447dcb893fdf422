// Opening a node's cluster session (see cluster_session.h).
#include "node/cluster/cluster_session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/log.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "node/cluster/live_state.h"
#include "node/cluster/part_signatures.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/config/host_port.h"
#include "node/control/listen_socket.h"

namespace chorus::node {

Status ClusterSession::InstallPeers(const MembershipView& next, Deadline deadline) {
  const bool had_epoch = !view.members.empty();
  const uint64_t left_epoch = view.epoch;
  view = next;
  installed->BeginInstall(next);
  const std::shared_ptr<const NodeCredentials> credentials = control != nullptr ? control->Credentials() : nullptr;
  part_signer = credentials != nullptr && next.self_rank >= 0
                    ? std::make_shared<CredentialPartSigner>(credentials, next)
                    : nullptr;
  if (!transport) return Status::Ok();
  std::vector<gossip::PeerInfo> peers;
  peers.reserve(next.members.size());
  const std::vector<bool> other_site = OtherSites(next);
  for (const Member& m : next.members) {
    peers.push_back({m.rank, m.data_address, m.name + "@" + m.control_address, other_site[static_cast<size_t>(m.rank)]});
  }
  // Over shm: a fresh endpoint per epoch, which every member must have
  // opened before any inserts it (Transport::BeginEpoch), and installed
  // before the first message to it.
  const bool barriers = transport->NeedsPeersInstalledBeforeFirstSend();
  CHORUS_RETURN_IF_ERROR(transport->BeginEpoch(next.epoch));
  CHORUS_RETURN_IF_ERROR(transport->SetEpochKey(next.epoch, next.data_key));
  if (barriers && next.epoch > 0) {
    CHORUS_RETURN_IF_ERROR(DataPlaneBarrier("data-plane endpoints opened", next.epoch, deadline));
  }
  CHORUS_RETURN_IF_ERROR(transport->SetPeers(next.self_rank, peers));
  installed->Installed(*transport);
  // A failure leaves messages that no receive will take: a round a neighbour
  // abandoned, the next round a survivor sent before it noticed. Over net (a
  // byte stream per peer) the first large one would hold back everything its
  // sender sends here after it, the new epoch's messages included. Both tag
  // layouts carry the epoch, so drop those of the epochs this node leaves (the
  // last few: older ones have long been drained).
  if (had_epoch && next.epoch > left_epoch) {
    constexpr uint64_t kEpochsBack = 4;
    const uint64_t oldest = next.epoch > kEpochsBack ? next.epoch - kEpochsBack : 0;
    for (uint64_t e = std::max(left_epoch, oldest); e < next.epoch; ++e) {
      transport->Discard(EpochTagFilter(e));
      transport->Discard(gossip::GossipEpochFilter(static_cast<uint32_t>(e)));
    }
  }
  if (barriers) CHORUS_RETURN_IF_ERROR(DataPlaneBarrier("data-plane peers installed", next.epoch, deadline));
  if (site_probe && !own_pace_ && view.size() > 1) return MeasureSites(deadline);
  return Status::Ok();
}

Status ClusterSession::MeasureSites(Deadline deadline) {
  Result<SiteProbe> probe =
      ProbeSites(*transport, view, *site_probe, SiteProbeTagBase(view.epoch), deadline, &known_links_);
  if (!probe) return probe.error().WithContext("measuring the links at epoch " + std::to_string(view.epoch));
  known_links_.Remember(*probe, view);
  const std::vector<std::string> contradictions = ApplyMeasuredSites(probe->groups, &view);
  transport->SetOtherSites(OtherSites(view));
  site_probe_report = SiteProbeJson(*probe, view, contradictions);
  CHORUS_LOG_INFO(Subsys::kNode, "epoch ", view.epoch, ": links measured in ", probe->seconds, " s (",
                  probe->measured_pairs, " pairs probed, ", probe->known_pairs, " known, ", probe->inferred_pairs,
                  " from a site's first member): ",
                  site_probe_report["groups"].dump(), " (gap ", probe->groups.gap, "x); this node's site is \"",
                  view.members[view.self_rank].SiteKey(), "\"", MeasuredHere(*probe, view));
  for (const std::string& c : contradictions) CHORUS_LOG_WARN(Subsys::kNode, "cluster.site: ", c);
  return Status::Ok();
}

Status ClusterSession::DataPlaneBarrier(const std::string& name, uint64_t epoch, Deadline deadline) {
  Status ready = control->Barrier(name, epoch, deadline);
  if (ready.ok()) return ready;
  return Status(ready.code(), "waiting at epoch " + std::to_string(epoch) + "'s barrier '" + name + "' (" +
                                  transport->Describe() + " needs every member there): " + ready.message());
}

Result<ClusterSession> JoinCluster(const Config& config, bool with_fabric, bool resume,
                                   std::function<void()> before_exit, const std::function<void()>& on_formed) {
  ClusterSession session;
  LocalNodeInfo local;
  CHORUS_ASSIGN_OR_RETURN(local.listen_fd, InheritedListenFd());
  local.name = config.run.node_name;
  local.device = config.train.device;
  local.batch_size = config.train.batch_size;
  local.host_group = config.cluster.host_group;
  local.site = config.cluster.site;
  if (config.exchange.site_probe) session.site_probe = SiteProbeOptions{};
  local.chorus_version = CHORUS_VERSION;
  local.libfabric_version = gossip::LibfabricVersion();
  local.provider = ProviderName(config.fabric.provider);
  local.shared_settings = SharedSettingsText(config);
  local.resume = resume;
  local.on_member = on_formed;
  Result<std::string> provider_version = gossip::FabricProviderVersion(config.fabric.provider);
  if (with_fabric) {
    if (!provider_version) return Err(provider_version.error());
    gossip::FabricOptions fabric;
    fabric.provider = config.fabric.provider;
    fabric.node_name = config.run.node_name;
    fabric.busy_poll = std::chrono::microseconds(config.fabric.busy_poll_us);
    fabric.wait_spin = std::chrono::microseconds(config.fabric.wait_spin_us);
    fabric.progress_max_sleep = std::chrono::microseconds(config.fabric.progress_max_sleep_us);
    fabric.authenticate = config.fabric.authenticate;
    fabric.encrypt = config.fabric.encrypt;
    fabric.rxm_eager_limit = static_cast<size_t>(config.fabric.rxm_eager_kib) << 10;
    // Fault injection for tests (docs/testing.md): a member replaying a message of an earlier epoch.
    fabric.replay_fault = std::getenv("CHORUS_FAULT_REPLAY") != nullptr;
    fabric.on_wedged = [before_exit](const Status& why) {
      CHORUS_LOG_ERROR(Subsys::kFabric, "data plane wedged: ", why.message(),
                       "; exiting with status 1 so that the other members go on without this node");
      if (before_exit) before_exit();
      _exit(1);
    };
    const std::string& bind = config.cluster.advertise.empty() ? config.cluster.listen
                                                               : config.cluster.advertise;
    Result<HostPort> host = ParseHostPort(bind);
    fabric.bind_address = host && host->host != "0.0.0.0" && host->host != "::" ? host->host : "";
    fabric.port = static_cast<uint16_t>(config.fabric.port);
    Result<std::unique_ptr<gossip::Transport>> transport = gossip::MakeFabricTransport(fabric);
    if (!transport) {
      return Err(config.fabric.port == 0
                     ? transport.error()
                     : transport.error().WithContext("data plane (fabric.port = " +
                                                     std::to_string(config.fabric.port) + ")"));
    }
    session.transport = std::move(*transport);
    local.data_address = session.transport->LocalAddress();
    CHORUS_LOG_INFO(Subsys::kFabric, "data plane: ", session.transport->Describe(), " (libfabric ",
                    local.libfabric_version, ")");
  } else {
    // No data plane: a placeholder address, so members still carry one.
    const std::string placeholder = "no-fabric:" + config.run.node_name;
    local.data_address.assign(placeholder.begin(), placeholder.end());
  }
  if (provider_version) {
    local.provider_version = *provider_version;
  } else {
    local.provider_version = "unavailable";
    CHORUS_LOG_WARN(Subsys::kNode, "provider ", ProviderName(config.fabric.provider),
                    " is not available here: ", provider_version.error().message());
  }

  CHORUS_ASSIGN_OR_RETURN(session.control, ControlPlane::Start(config.cluster, local));
  CHORUS_ASSIGN_OR_RETURN(
      MembershipView formed,
      session.control->WaitForEpoch0(Deadline::AfterSeconds(config.cluster.join_timeout_s)));
  session.joined_running = formed.epoch > 0;
  if (Status installed = session.InstallPeers(formed, Deadline::AfterSeconds(config.cluster.join_timeout_s));
      !installed.ok()) {
    // kCancelled from here is no ended run (RunEndedBeforeAdmission).
    return Err(installed.code() == StatusCode::kCancelled ? Unavailable(installed.message()) : installed);
  }
  if (session.transport) {
    // A member whose control connection closed has (almost always) died: fail
    // our pending data-plane operations with it now rather than at their
    // deadline, and post no new ones to it. Once it is declared dead, or has
    // stopped before the end of its run, end the epoch's operations with every
    // member (InstalledPeers).
    gossip::Transport* transport = session.transport.get();
    std::shared_ptr<InstalledPeers> installed = session.installed;
    session.control->OnMemberFailure([transport, installed](const MemberFailure& f) {
      if (f.kind == MemberFailure::Kind::kConnectionLost) {
        installed->ConnectionLost(f.name, *transport);
      } else {
        installed->MemberDead(f, *transport);
      }
    });
    session.control->OnViewChange(
        [transport, installed](const MembershipView& latest) { installed->ViewChanged(latest, *transport); });
  }
  return session;
}

}  // namespace chorus::node
