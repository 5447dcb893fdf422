// Forming a cluster with no designated founder, and joining one (state in
// control_plane_impl.h; epoch 0 itself is fixed in control_membership.cc).
//
// Discovery. A node not in a formed cluster keeps known_: its cluster.bootstrap
// entries other than itself, and every address it learns. It probes each one
// in rounds (every 100 ms, doubling to 1 s; a newly learned address at once):
// a StateRequest carrying its advertised address, the addresses it knows and
// its join terms. The answer (State) says whether that node is in a formed
// cluster, whether it is the founder candidate, which node accepted its join,
// and what it knows. Both sides learn from the exchange, so nodes whose
// bootstrap lists connect (as an undirected graph) all learn each other.
//
// Founder choice. Among itself and the unformed nodes that answered, the
// lowest advertised address (AddressBefore) is the founder candidate (not
// before every known address answered, or failed for cluster.dead_timeout_s
// since the node began to look: one may not listen yet): it
// accepts joins and fixes epoch 0 once cluster.min_nodes are present
// (MaybeFormEpoch0); every other node joins it. A candidate that learns of a
// lower unformed node defers: it redirects its applicants there and joins it.
// A node that learns of a formed cluster joins it through the node that
// answered (a member redirects to its coordinator), a candidate redirecting
// its applicants there first. An applicant stays with the node that accepted
// it until it is welcomed, redirected or disconnected. A join that reaches an
// unformed node that is not the candidate is redirected to the lowest address
// that node knows, or refused (retryable) when the joiner is lower still.
//
// Join only (cluster.join_only, set by a node that rejoins by itself). The
// node joins formed clusters only: it never becomes the candidate, never
// applies to an unformed node, follows only redirects to a coordinator, and
// refuses the probes of forming nodes, which therefore choose their founder
// among themselves. It fails after cluster.join_timeout_s without a formed
// cluster to apply to.
//
// Refusals. A probe whose join terms differ (shared settings; --resume before
// formation) is refused as its join would be, and the prober stops, as it does
// for another token or version in the handshake. A duplicate name is retried
// until cluster.join_timeout_s: the coordinator may not have seen the old
// process die yet.
#include <algorithm>
#include <sstream>

#include "common/enum_names.h"
#include "common/log.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

// Probe rounds and join retries start this far apart and double up to kMaxRetryDelay.
constexpr Duration kFirstRetryDelay = std::chrono::milliseconds(100);
constexpr Duration kMaxRetryDelay = std::chrono::seconds(1);
// Redirects followed in a row before the join counts as failed.
constexpr int kMaxRedirects = 4;
// Addresses kept; more (from a peer gone wrong) are ignored.
constexpr size_t kMaxKnown = 1024;
// While not a member: one line on whom this node waits for, at most this often.
constexpr auto kWaitLogEvery = std::chrono::seconds(5);

std::string List(const std::vector<std::string>& items) {
  return items.empty() ? "none" : JoinNames(items);
}

// A refusal by the handshake (another token: kPermissionDenied; another
// version: kFailedPrecondition) that no retry can change.
bool FinalRefusal(const Status& s) {
  return s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kFailedPrecondition;
}

// How a probe answer describes the node: "formed at epoch 3", "unformed", ...
std::string StateWords(const msg::State& s) {
  if (s.formed) return "formed at epoch " + std::to_string(s.epoch) + ", coordinator " + s.coordinator;
  if (s.candidate) return "founder candidate with " + std::to_string(1 + s.pending.size()) + " present";
  if (!s.applied_to.empty()) return "applied to " + s.applied_to + (s.applied_formed ? " (formed)" : "");
  return "unformed";
}

// Names the first line where two nodes' shared settings differ (the lines come
// in one order from one chorus version; the handshake refused other versions).
std::string SettingsDifference(const std::string& ours_name, const std::string& ours,
                               const std::string& theirs_name, const std::string& theirs) {
  std::istringstream a(ours);
  std::istringstream b(theirs);
  std::string line_a;
  std::string line_b;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, line_a));
    const bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) break;
    if (!more_a) line_a = "nothing";
    if (!more_b) line_b = "nothing";
    if (line_a != line_b) {
      return "the settings every member must share differ: " + ours_name + " has " + line_a + ", " +
             theirs_name + " has " + line_b;
    }
  }
  return "the settings every member must share differ";
}

}  // namespace

void ControlPlaneImpl::BeginForming() {
  for (const std::string& b : config_.bootstrap) {
    if (b == advertise_ || b == listen_display_) continue;
    bootstrap_names_others_ = true;
    known_.try_emplace(b);
  }
  phase_ = Phase::kJoining;
  join_started_ = Clock::now();
  last_wait_log_ = join_started_;
  probe_delay_ = kFirstRetryDelay;
  join_retry_delay_ = kFirstRetryDelay;
  CHORUS_LOG_INFO(Subsys::kControl, self_.name, " looks for its cluster (cluster.min_nodes=", config_.min_nodes,
                  "): ", known_.empty() ? "cluster.bootstrap names no other node" : "probing " + List(KnownAddresses()));
  for (const auto& [address, k] : known_) Probe(address);
  Reconsider();
  StartProbeTimer();
}

void ControlPlaneImpl::Learn(const std::string& address, bool alive) {
  if (address.empty() || address == advertise_ || address == listen_display_ || !Forming()) return;
  auto it = known_.find(address);
  if (it == known_.end()) {
    if (known_.size() >= kMaxKnown) return;
    known_.try_emplace(address);
    probe_delay_ = kFirstRetryDelay;
    Probe(address);
  } else if (alive && it->second.reach == Known::Reach::kFailed) {
    Probe(address);
  }
}

std::vector<std::string> ControlPlaneImpl::KnownAddresses() const {
  std::vector<std::string> out;
  for (const auto& [address, k] : known_) {
    if (!k.self) out.push_back(address);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Probes: the prober's side

void ControlPlaneImpl::StartProbeTimer() {
  join_timer_.expires_after(probe_delay_);
  join_timer_.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    Locked([this] { ProbeRound(); });
  });
}

void ControlPlaneImpl::ProbeRound() {
  if (!Forming()) return;
  const Clock::time_point now = Clock::now();
  if (CheckFormingDeadline(now)) return;
  for (const auto& [address, k] : known_) Probe(address);
  MaybeLogWaiting(now);
  Reconsider();
  probe_delay_ = std::min<Duration>(probe_delay_ * 2, kMaxRetryDelay);
  StartProbeTimer();
}

void ControlPlaneImpl::Probe(const std::string& address) {
  auto it = known_.find(address);
  if (it == known_.end() || it->second.probing || it->second.self) return;
  it->second.probing = true;
  AsyncDial(io_, address, kMaxControlDialTime, [this, address](Result<asio::ip::tcp::socket> s, bool /*refused*/) {
    Locked([&] {
      Known& k = known_[address];
      if (!Forming()) {
        k.probing = false;
        return;
      }
      if (!s) {
        k.probing = false;
        k.reach = Known::Reach::kFailed;
        k.error = s.error().message();
        Reconsider();
        return;
      }
      probes_[StartDialed(std::move(*s))->id()] = address;
    });
  });
}

void ControlPlaneImpl::OnProbeEstablished(const std::shared_ptr<Connection>& conn) {
  msg::StateRequest request;
  request.sender = self_.name;
  request.control_address = advertise_;
  request.known = KnownAddresses();
  request.shared_settings = shared_settings_;
  request.resume = resume_;
  conn->Send(request);
}

void ControlPlaneImpl::HandleProbeReply(const std::shared_ptr<Connection>& conn, const ControlMessage& message) {
  auto probe = probes_.find(conn->id());
  const std::string address = probe->second;
  probes_.erase(probe);
  conn->CloseAfterFlush(Status::Ok());
  Known& k = known_[address];
  k.probing = false;
  if (!Forming()) return;
  if (const auto* reject = std::get_if<msg::Reject>(&message)) {
    if (reject->code == RejectCode::kRunEnded) {
      EndBeforeAdmission(conn->Describe() + ": " + reject->reason);
      return;
    }
    if (reject->code != RejectCode::kNotMember && reject->code != RejectCode::kOther) {
      Fail(FailedPrecondition("joining through " + address + ": refused by " + conn->Describe() + ": " +
                              reject->reason));
      return;
    }
    k.reach = Known::Reach::kFailed;
    k.error = "refused: " + reject->reason;
    Reconsider();
    return;
  }
  const auto* state = std::get_if<msg::State>(&message);
  if (state == nullptr) return;  // a redirect answers no probe
  k.reach = Known::Reach::kAnswered;
  k.name = conn->peer_name();
  k.state = *state;
  k.error.clear();
  k.self = state->address.empty() ? k.name == self_.name : state->address == advertise_;
  if (k.self) return;
  contacted_ = true;
  if (state->formed) reached_formed_ = k.name + " (" + address + ")";
  Learn(state->address, /*alive=*/true);
  Learn(state->applied_to, /*alive=*/false);
  for (const std::string& a : state->known) Learn(a, /*alive=*/false);
  Reconsider();
}

void ControlPlaneImpl::OnProbeClosed(const std::shared_ptr<Connection>& conn, const Status& reason) {
  auto probe = probes_.find(conn->id());
  const std::string address = probe->second;
  probes_.erase(probe);
  Known& k = known_[address];
  k.probing = false;
  if (!Forming()) return;
  if (FinalRefusal(reason)) {
    Fail(reason.WithContext("joining through " + address));
    return;
  }
  k.reach = Known::Reach::kFailed;
  k.error = reason.ok() ? conn->Describe() + " closed the connection without an answer" : reason.message();
  Reconsider();
}

// ---------------------------------------------------------------------------
// Probes: the answering side

void ControlPlaneImpl::HandleStateRequest(const std::shared_ptr<Connection>& conn,
                                          const msg::StateRequest& request) {
  if (!request.control_address.empty()) {  // a discovery probe, not a tool
    if (run_ended_ && formed_ && view_.Find(conn->peer_name()) != nullptr) {
      // A member of the run's view that probes before its copy of the view
      // came (a founding member whose Welcome is on its way): it was admitted,
      // and gets the Leave as every member does. "The run ended before you
      // were admitted" would end it as never admitted.
      conn->Send(msg::Reject{RejectCode::kNotMember, self_.name + " is leaving at the end of its run at epoch " +
                                                         std::to_string(view_.epoch) + ", of which " +
                                                         conn->peer_name() + " is a member"});
      conn->CloseAfterFlush(Status::Ok());
      return;
    }
    if (run_ended_) return RefuseAfterTheRun(conn, conn->peer_name());
    if (phase_ == Phase::kStarting) {
      // Not deciding yet: an answer now would count this node as forming
      // while it may be about to found (or join) a cluster.
      conn->Send(msg::Reject{RejectCode::kNotMember, self_.name + " is starting"});
      conn->CloseAfterFlush(Status::Ok());
      return;
    }
    const std::string refusal = JoinTermsRefusal(conn->peer_name(), request.shared_settings, request.resume);
    if (!refusal.empty()) {
      CHORUS_LOG_WARN(Subsys::kControl, "refusing the join of ", conn->Describe(), ": ", refusal);
      conn->Send(msg::Reject{RejectCode::kSettingsMismatch, refusal});
      conn->CloseAfterFlush(Status::Ok());
      return;
    }
    if (Forming()) {
      contacted_ = true;
      Learn(request.control_address, /*alive=*/true);
      for (const std::string& a : request.known) Learn(a, /*alive=*/false);
      if (config_.join_only) {
        // Not a founder for the prober to choose: it forms without this node.
        conn->Send(msg::Reject{RejectCode::kNotMember, self_.name + " only joins a formed cluster (cluster.join_only)"});
        conn->CloseAfterFlush(Status::Ok());
        return;
      }
    }
  }
  conn->Send(BuildState());
}

// ---------------------------------------------------------------------------
// The founder choice

std::string ControlPlaneImpl::LowestUnformed() const {
  std::string lowest = advertise_;
  for (const auto& [key, k] : known_) {
    if (k.reach != Known::Reach::kAnswered || k.self || k.state.formed) continue;
    if (AddressBefore(k.Address(key), lowest)) lowest = k.Address(key);
  }
  return lowest;
}

std::string ControlPlaneImpl::FormedClusterNode() const {
  std::string best;
  for (const auto& [key, k] : known_) {
    if (k.reach != Known::Reach::kAnswered || k.self || !k.state.formed) continue;
    if (best.empty() || AddressBefore(k.Address(key), best)) best = k.Address(key);
  }
  return best;
}

std::string ControlPlaneImpl::NameAt(const std::string& address) const {
  for (const auto& [key, k] : known_) {
    if (k.reach == Known::Reach::kAnswered && k.Address(key) == address) return k.name;
  }
  return std::string();
}

void ControlPlaneImpl::Reconsider() {
  if (!Forming() || (phase_ == Phase::kWaiting && !founder_)) return;
  if (const std::string formed = FormedClusterNode(); !formed.empty()) {
    if (founder_) StepDown(formed, /*formed=*/true, "it is in a formed cluster");
    JoinThrough(formed);
    return;
  }
  if (config_.join_only) return;  // it waits for a formed cluster to answer
  const std::string lowest = LowestUnformed();
  if (lowest != advertise_) {
    if (founder_) StepDown(lowest, /*formed=*/false, "a lower address, not yet formed");
    JoinThrough(lowest);
    return;
  }
  if (!founder_) {
    // Not before every known address has answered or failed once (a lower
    // node may be about to answer), nor, while one has not answered, before
    // the dead timeout since this node began to look: nodes started together
    // by hand, each bootstrapping one that does not listen yet, would
    // otherwise each found a cluster of their own (with cluster.min_nodes =
    // 1) and never meet. The probe rounds call this again.
    const bool may_still_listen = Clock::now() - join_started_ < dead_after_;
    for (const auto& [key, k] : known_) {
      if (k.self) continue;
      if (k.reach == Known::Reach::kUntried || (may_still_listen && k.reach == Known::Reach::kFailed)) return;
    }
    if (!reached_formed_.empty()) return;  // it joins a formed cluster or none
    BecomeCandidate();
  }
  MaybeFormEpoch0();
}

void ControlPlaneImpl::BecomeCandidate() {
  if (join_conn_) {
    std::shared_ptr<Connection> abandoned = std::move(join_conn_);
    join_conn_.reset();
    abandoned->Close(Status::Ok());
  }
  founder_ = true;
  phase_ = Phase::kWaiting;
  CHORUS_LOG_INFO(Subsys::kControl, self_.name, " is the founder candidate at ", advertise_,
                  ", the lowest address of the forming nodes it reached (waiting for ", config_.min_nodes, " node",
                  config_.min_nodes == 1 ? "" : "s", ")");
  cv_.notify_all();
}

void ControlPlaneImpl::StepDown(const std::string& target, bool formed, const std::string& why) {
  CHORUS_LOG_INFO(Subsys::kControl, self_.name, " defers to ", target, " (", why, ")",
                  applicants_.empty() ? std::string()
                                      : ", redirecting " + std::to_string(applicants_.size()) + " applicant" +
                                            (applicants_.size() == 1 ? "" : "s") + " there");
  const std::string name = NameAt(target);
  for (const Applicant& a : applicants_) {
    a.conn->Send(msg::Redirect{name, target, formed});
    a.conn->CloseAfterFlush(Status::Ok());
  }
  applicants_.clear();
  founder_ = false;
  phase_ = Phase::kJoining;
  next_join_at_ = Clock::time_point{};
  cv_.notify_all();
}

void ControlPlaneImpl::TellApplicants() {
  if (formed_ || !founder_) return;
  const msg::State state = BuildState();
  for (const Applicant& a : applicants_) a.conn->Send(state);
}

// ---------------------------------------------------------------------------
// Joining: the joiner's side

void ControlPlaneImpl::JoinThrough(const std::string& address) {
  if (phase_ != Phase::kJoining || join_conn_ || join_dialing_ || Clock::now() < next_join_at_) return;
  join_redirects_ = 0;
  DialJoin(address);
}

void ControlPlaneImpl::DialJoin(const std::string& address) {
  if (address == advertise_ || address == listen_display_) {
    JoinFailed(address, "the join was sent to this node's own address", /*unreachable=*/false);
    return;
  }
  join_address_ = address;
  join_dialing_ = true;
  AsyncDial(io_, address, kMaxControlDialTime, [this, address](Result<asio::ip::tcp::socket> s, bool /*refused*/) {
    Locked([&] {
      join_dialing_ = false;
      if (phase_ != Phase::kJoining) return;
      if (!s) {
        JoinFailed(address, s.error().message(), /*unreachable=*/true);
        return;
      }
      join_conn_ = StartDialed(std::move(*s));
    });
  });
}

void ControlPlaneImpl::JoinFailed(const std::string& address, const std::string& why, bool unreachable) {
  last_refusal_ = address + ": " + why;
  auto it = known_.find(address);
  if (it != known_.end() && unreachable) {
    it->second.reach = Known::Reach::kFailed;
    it->second.error = why;
  } else if (it != known_.end()) {
    Probe(address);  // what we knew of it is stale
  }
  next_join_at_ = Clock::now() + join_retry_delay_;
  join_retry_timer_.expires_after(join_retry_delay_);
  join_retry_timer_.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    Locked([this] { Reconsider(); });
  });
  join_retry_delay_ = std::min<Duration>(join_retry_delay_ * 2, kMaxRetryDelay);
  Reconsider();
}

void ControlPlaneImpl::OnJoinConnectionClosed(const std::shared_ptr<Connection>& conn, const Status& reason) {
  join_conn_.reset();
  if (phase_ == Phase::kJoining) {
    if (FinalRefusal(reason)) {
      Fail(reason.WithContext("joining through " + join_address_));
      return;
    }
    JoinFailed(join_address_, reason.ok() ? "closed the connection" : reason.message(), /*unreachable=*/true);
  } else if (phase_ == Phase::kWaiting && !founder_ && !formed_) {
    CHORUS_LOG_WARN(Subsys::kControl, "lost ", conn->Describe(), " before ",
                    applied_state_.formed ? "being admitted" : "epoch 0 was fixed", ": looking again");
    phase_ = Phase::kJoining;
    coordinator_name_.clear();
    applied_address_.clear();
    applied_state_ = msg::State{};
    join_retry_delay_ = kFirstRetryDelay;
    JoinFailed(join_address_, "closed the connection after accepting the join", /*unreachable=*/true);
  }
}

void ControlPlaneImpl::HandleJoinReply(const std::shared_ptr<Connection>& conn, ControlMessage& message) {
  if (auto* state = std::get_if<msg::State>(&message)) {
    if (phase_ == Phase::kJoining && config_.join_only && !state->formed) {
      join_conn_.reset();
      conn->CloseAfterFlush(Status::Ok());
      JoinFailed(join_address_, "not in a formed cluster (cluster.join_only)", /*unreachable=*/false);
      return;
    }
    if (phase_ == Phase::kJoining) {
      phase_ = Phase::kWaiting;
      if (state->formed) reached_formed_ = conn->peer_name() + " (" + join_address_ + ")";
      coordinator_name_ = conn->peer_name();
      applied_address_ = join_address_;
      applied_state_ = *state;
      join_retry_delay_ = kFirstRetryDelay;
      last_refusal_.clear();
      name_refusal_.reset();
      LogAccepted(*state);
      cv_.notify_all();
    } else if (phase_ == Phase::kWaiting && !founder_) {
      applied_state_ = *state;  // the candidate's applicants changed
    }
    return;
  }
  // A redirect or a refusal ends this join, also one that was accepted.
  join_conn_.reset();
  conn->CloseAfterFlush(Status::Ok());
  if (phase_ == Phase::kWaiting && !founder_ && !formed_) {
    phase_ = Phase::kJoining;
    coordinator_name_.clear();
    applied_address_.clear();
    applied_state_ = msg::State{};
    join_redirects_ = 0;
  }
  if (phase_ != Phase::kJoining) return;
  if (auto* redirect = std::get_if<msg::Redirect>(&message)) {
    const std::string& target = redirect->coordinator_address;
    CHORUS_LOG_INFO(Subsys::kControl, conn->Describe(), " redirects the join to ",
                    redirect->formed ? "coordinator " : "founder candidate ", redirect->coordinator_name, " (",
                    target, ")");
    Learn(target, /*alive=*/false);
    // An unformed target only when it is lower than this node: otherwise this
    // node is the candidate, and the probes settle it.
    if (!target.empty() && ++join_redirects_ <= kMaxRedirects &&
        (redirect->formed || (!config_.join_only && AddressBefore(target, advertise_)))) {
      DialJoin(target);
    } else {
      JoinFailed(join_address_, target.empty() ? "redirected nowhere" : "redirected to " + target,
                 /*unreachable=*/false);
    }
    return;
  }
  const auto* reject = std::get_if<msg::Reject>(&message);
  if (reject == nullptr) return;
  const std::string refusal =
      "joining through " + join_address_ + ": refused by " + conn->Describe() + ": " + reject->reason;
  if (reject->code == RejectCode::kNotMember || reject->code == RejectCode::kOther) {
    JoinFailed(join_address_, "refused: " + reject->reason, /*unreachable=*/false);
  } else if (reject->code == RejectCode::kRunEnded) {
    EndBeforeAdmission(conn->Describe() + ": " + reject->reason);
  } else if (reject->code == RejectCode::kDuplicateName) {
    if (!name_refusal_) {
      CHORUS_LOG_WARN(Subsys::kControl, refusal, "; trying again until cluster.join_timeout_s (the coordinator "
                      "may not have seen an old process with that name die yet)");
    }
    name_refusal_ = FailedPrecondition(refusal);
    JoinFailed(join_address_, "refused: " + reject->reason, /*unreachable=*/false);
  } else {
    Fail(FailedPrecondition(refusal));
  }
}

void ControlPlaneImpl::EndBeforeAdmission(const std::string& why) {
  Fail(Cancelled(self_.name + " was not admitted: the cluster ended its run first (" + why +
                 "); nothing is left to train"),
       LogLevel::kWarn);
}

void ControlPlaneImpl::LogAccepted(const msg::State& state) {
  if (!state.formed) {
    CHORUS_LOG_INFO(Subsys::kControl, coordinator_name_, " accepted the join: ", 1 + state.pending.size(),
                    " of cluster.min_nodes=", config_.min_nodes, " present, waiting for epoch 0");
  } else if (state.next_admission_step > 0 && state.step >= 0) {
    CHORUS_LOG_INFO(Subsys::kControl, "accepted by ", coordinator_name_, ": the cluster is at epoch ", state.epoch,
                    ", step ", state.step, "; admission at its next admission point, step ",
                    state.next_admission_step);
  } else {
    CHORUS_LOG_INFO(Subsys::kControl, coordinator_name_, " accepted the join: the cluster is at epoch ", state.epoch,
                    " with ", state.members.size(), " members; waiting for the next epoch boundary");
  }
}

// ---------------------------------------------------------------------------
// Joining: the founder candidate's or the coordinator's side

void ControlPlaneImpl::HandleJoin(const std::shared_ptr<Connection>& conn, const msg::Join& join) {
  const Member& info = join.info;
  if (info.name.empty() || info.name != conn->peer_name()) {
    conn->Send(msg::Reject{RejectCode::kProtocol, "the join must carry the node name of the hello"});
    conn->CloseAfterFlush(InvalidArgument(conn->Describe() + " joined as '" + info.name +
                                          "', not as the name in its hello"));
    return;
  }
  if (run_ended_) return RefuseAfterTheRun(conn, info.name);
  if (!formed_ && Forming() && !IsCoordinator()) return AnswerJoinElsewhere(conn, join);
  if (!IsCoordinator()) {
    const std::string coordinator = formed_ ? ExpectedCoordinator() : std::string();
    const Member* cm = coordinator.empty() ? nullptr : view_.Find(coordinator);
    if (phase_ == Phase::kMember && cm) {
      CHORUS_LOG_INFO(Subsys::kControl, "redirecting the join of ", conn->Describe(), " to coordinator ",
                      cm->name, " (", cm->control_address, ")");
      conn->Send(msg::Redirect{cm->name, cm->control_address, /*formed=*/true});
    } else {
      conn->Send(msg::Reject{RejectCode::kNotMember, self_.name + " is not a cluster member (" +
                                                         std::string(PhaseName(phase_)) + ")"});
    }
    conn->CloseAfterFlush(Status::Ok());
    return;
  }
  auto refuse = [&](RejectCode code, const std::string& reason) {
    CHORUS_LOG_WARN(Subsys::kControl, "refusing the join of ", conn->Describe(), ": ", reason);
    conn->Send(msg::Reject{code, reason});
    conn->CloseAfterFlush(Status::Ok());
  };
  if (std::string expelled = ExpelledReason(info.name); !expelled.empty()) {
    return refuse(RejectCode::kExpelled, expelled);
  }
  if (std::string terms = JoinTermsRefusal(info.name, join.shared_settings, join.resume); !terms.empty()) {
    refuse(RejectCode::kSettingsMismatch, terms);
    return;
  }
  if (!formed_) {
    contacted_ = true;
    Learn(info.control_address, /*alive=*/true);
    // A lower joiner was sent here by a stale picture: it is the candidate.
    if (AddressBefore(info.control_address, advertise_)) {
      conn->Send(msg::Reject{RejectCode::kNotMember, info.control_address + " is lower than " + advertise_ +
                                                         ": it is the founder candidate, not " + self_.name});
      conn->CloseAfterFlush(Status::Ok());
      return;
    }
  }
  std::string taken_by;
  bool restarted = false;
  if (info.name == self_.name) {
    taken_by = advertise_;
  } else if (const Member* m = formed_ ? view_.Find(info.name) : nullptr; m && !Gone(info.name)) {
    restarted = RestartsMember(conn, info);
    if (!restarted) taken_by = m->control_address;
  }
  for (const Applicant& a : applicants_) {
    if (a.info.name == info.name && a.conn != conn && !a.conn->closed()) taken_by = a.info.control_address;
  }
  if (!taken_by.empty()) {
    refuse(RejectCode::kDuplicateName, "node name '" + info.name + "' is already used by " + taken_by);
    return;
  }
  for (auto it = applicants_.begin(); it != applicants_.end();) {
    it = it->info.name == info.name ? applicants_.erase(it) : it + 1;
  }
  Member applicant = info;
  applicant.rank = -1;
  applicants_.push_back({applicant, conn});
  if (!formed_) {
    CHORUS_LOG_INFO(Subsys::kControl, info.name, " (", info.control_address, ") joins: ",
                    1 + applicants_.size(), " of cluster.min_nodes=", config_.min_nodes, " present");
    TellApplicants();
    MaybeFormEpoch0();
  } else {
    conn->Send(BuildState());
    CHORUS_LOG_INFO(Subsys::kControl, info.name, " (", info.control_address, ") asks to join epoch ",
                    view_.epoch, ": admitted at the next epoch boundary");
    if (restarted) MaybePropose();
  }
}

std::string ControlPlaneImpl::JoinTermsRefusal(const std::string& name, const std::string& settings,
                                               bool resume) const {
  if (settings != shared_settings_) return SettingsDifference(self_.name, shared_settings_, name, settings);
  // The founding members synchronise a resumed state collectively at epoch 0
  // (MembershipTransitions::Resumed): one that skipped it would wait in its first step for
  // members waiting in that synchronisation, and both would time out. A node
  // that joins later is synchronised by its admission.
  if (!formed_ && resume != resume_) {
    const std::string& resuming = resume_ ? self_.name : name;
    const std::string& fresh = resume_ ? name : self_.name;
    return resuming + " resumes from its checkpoint (--resume) and " + fresh +
           " does not: the founding nodes of a cluster resume together (pass --resume to every node, or to none)";
  }
  return std::string();
}

// ---------------------------------------------------------------------------
// Joining: an unformed node that is not the candidate

void ControlPlaneImpl::AnswerJoinElsewhere(const std::shared_ptr<Connection>& conn, const msg::Join& join) {
  const std::string& joiner = join.info.control_address;
  contacted_ = true;
  Learn(joiner, /*alive=*/true);
  const std::string formed = FormedClusterNode();
  const std::string lowest = LowestUnformed();
  if (!formed.empty()) {
    conn->Send(msg::Redirect{NameAt(formed), formed, /*formed=*/true});
  } else if (lowest != advertise_ && AddressBefore(lowest, joiner)) {
    conn->Send(msg::Redirect{NameAt(lowest), lowest, /*formed=*/false});
  } else {
    conn->Send(msg::Reject{RejectCode::kNotMember,
                           self_.name + " does not accept joins (" +
                               (phase_ == Phase::kWaiting ? "it applied to " + applied_address_
                                                          : std::string("it is not the founder candidate")) +
                               "); probe again"});
  }
  conn->CloseAfterFlush(Status::Ok());
}

// ---------------------------------------------------------------------------
// Deadlines and reports

bool ControlPlaneImpl::CheckFormingDeadline(Clock::time_point now) {
  if (now - join_started_ < join_timeout_) return false;
  if (name_refusal_ && phase_ == Phase::kJoining) {
    Fail(*name_refusal_);
    return true;
  }
  if (bootstrap_names_others_ && !contacted_) {
    Fail(Unavailable("could not reach any node of cluster.bootstrap within " + SecondsText(join_timeout_) + " s (" +
                     FormingReport() + ")"));
    return true;
  }
  if (config_.join_only && phase_ == Phase::kJoining) {
    Fail(Unavailable("found no formed cluster to join within cluster.join_timeout_s=" + SecondsText(join_timeout_) +
                     " s (cluster.join_only: " + FormingReport() + ")"));
    return true;
  }
  return false;
}

void ControlPlaneImpl::MaybeLogWaiting(Clock::time_point now) {
  if (now - last_wait_log_ < kWaitLogEvery) return;
  last_wait_log_ = now;
  CHORUS_LOG_INFO(Subsys::kControl, self_.name, " is not a cluster member yet: ", FormingReport());
}

std::string ControlPlaneImpl::FormingReport() const {
  const std::string min_nodes = "cluster.min_nodes=" + std::to_string(config_.min_nodes);
  std::string role;
  if (phase_ == Phase::kWaiting && founder_) {
    std::vector<std::string> present{self_.name};
    for (const Applicant& a : applicants_) present.push_back(a.info.name);
    const int missing = config_.min_nodes - static_cast<int>(present.size());
    role = "founder candidate with " + std::to_string(present.size()) + " of " + min_nodes +
           " present: " + List(present) + "; waiting for: ";
    if (missing > 0) {
      role += std::to_string(missing) + " more node" + (missing == 1 ? "" : "s");
    } else {
      role += "any node of cluster.bootstrap to answer";
    }
  } else if (phase_ == Phase::kWaiting && !formed_) {
    const std::string who = coordinator_name_ + " (" + applied_address_ + ")";
    role = applied_state_.formed
               ? "applied to " + who + ", coordinator of the cluster at epoch " +
                     std::to_string(applied_state_.epoch) + "; waiting for admission at its next epoch boundary"
               : "applied to " + who + ", which has " + std::to_string(1 + applied_state_.pending.size()) +
                     " of " + min_nodes + " present";
  } else if (phase_ == Phase::kJoining) {
    role = config_.join_only ? "looking for a formed cluster to join (cluster.join_only)"
                             : "looking for a node that accepts the join";
    if (!reached_formed_.empty()) {
      role += " (it reached the formed cluster of " + reached_formed_ + ": it joins that cluster, founds none)";
    }
    if (join_conn_ || join_dialing_) role += ", joining through " + join_address_;
    if (!last_refusal_.empty()) role += " (last attempt: " + last_refusal_ + ")";
  } else {
    role = std::string(PhaseName(phase_));
  }
  std::vector<std::string> reached;
  std::vector<std::string> unreached;
  for (const auto& [key, k] : known_) {
    if (k.self) continue;
    switch (k.reach) {
      case Known::Reach::kAnswered:
        reached.push_back(key + " (" + k.name + ", " + StateWords(k.state) + ")");
        break;
      case Known::Reach::kFailed:
        unreached.push_back(k.error.find(key) != std::string::npos ? k.error : key + " (" + k.error + ")");
        break;
      case Known::Reach::kUntried:
        unreached.push_back(key + " (no answer yet)");
        break;
    }
  }
  return role + "; reached: " + List(reached) + "; not reached: " + List(unreached);
}

}  // namespace chorus::node
