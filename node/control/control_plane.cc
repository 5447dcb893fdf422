// ControlPlane: start-up, the public API and connection bookkeeping. Forming
// and joining (probes, the founder candidate, redirects) are in
// control_discovery.cc; the membership protocol itself (epoch 0, liveness,
// proposals, barriers, leaving) in control_membership.cc; the shared state in
// control_plane_impl.h.
#include "node/control/control_plane.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "node/config/host_port.h"
#include "node/control/control_client.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

Duration SecondsToDuration(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string JoinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// Messages queued for a member that is not connected at the moment.
constexpr size_t kMaxOutbox = 1024;
// The longest shutting down waits for connections to flush what is queued
// (each gives up after 1 s of its own: Connection::CloseAfterFlush).
constexpr auto kShutdownFlushTime = std::chrono::milliseconds(1500);

}  // namespace

// ---------------------------------------------------------------------------
// ControlPlane (the public face)

ControlPlane::ControlPlane(std::unique_ptr<ControlPlaneImpl> impl) : impl_(std::move(impl)) {}
ControlPlane::~ControlPlane() = default;

Result<std::shared_ptr<const NodeCredentials>> LoadClusterCredential(const ClusterConfig& config,
                                                                   const std::string& name) {
  if (config.issuer.empty()) return std::shared_ptr<const NodeCredentials>();
  CHORUS_ASSIGN_OR_RETURN(const SignPublicKey issuer, ParseIssuerKey(config.issuer));
  if (config.credential.empty()) {
    return Err(InvalidArgument("cluster.issuer is set and cluster.credential is not: this node has no "
                               "credential to show (`chorus credential issue` makes one)"));
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<SignPublicKey> revoked, ParseRevokedKeys(config.revoked));
  return NodeCredentials::Load(config.credential, issuer, name, std::move(revoked));
}

Result<std::unique_ptr<ControlPlane>> ControlPlane::Start(const ClusterConfig& config,
                                                          LocalNodeInfo local) {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  if (!(config.heartbeat_interval_s > 0) || !(config.suspect_timeout_s > config.heartbeat_interval_s) ||
      !(config.dead_timeout_s >= config.suspect_timeout_s)) {
    return Err(InvalidArgument(
        "cluster timeouts must satisfy 0 < heartbeat_interval_s < suspect_timeout_s <= dead_timeout_s, got " +
        SecondsText(config.heartbeat_interval_s) + ", " + SecondsText(config.suspect_timeout_s) + ", " +
        SecondsText(config.dead_timeout_s)));
  }
  if (config.min_nodes < 1) return Err(InvalidArgument("cluster.min_nodes must be >= 1"));
  Member self;
  self.name = local.name;
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<const NodeCredentials> credentials,
                          LoadClusterCredential(config, self.name));
  if (credentials) self.name = credentials->credential().name;
  if (self.name.empty()) {
    self.name = config.rank_hint >= 0 ? "node" + std::to_string(config.rank_hint)
                                      : HostName() + "-" + std::to_string(getpid());
  }
  self.data_address = std::move(local.data_address);
  self.device = local.device;
  self.batch_size = local.batch_size;
  self.host_group = !local.host_group.empty() ? local.host_group
                    : !config.host_group.empty() ? config.host_group
                                                 : HostName();
  self.site = !local.site.empty() ? local.site : !config.site.empty() ? config.site : self.host_group;
  self.rank_hint = config.rank_hint;
  VersionInfo versions{local.chorus_version, local.libfabric_version, local.provider,
                       local.provider_version};

  auto impl =
      std::make_unique<ControlPlaneImpl>(config, std::move(self), std::move(versions), std::move(credentials));
  impl->set_join_terms(std::move(local.shared_settings), local.resume);
  impl->set_on_member(std::move(local.on_member));
  CHORUS_RETURN_IF_ERROR(impl->Listen(local.listen_fd));
  impl->StartThread();
  Status check = impl->SelfCheck();
  if (!check.ok()) return Err(check);  // ~ControlPlaneImpl stops the thread
  impl->Begin();
  return std::unique_ptr<ControlPlane>(new ControlPlane(std::move(impl)));
}

uint16_t ControlPlane::port() const { return impl_->port(); }
const std::string& ControlPlane::advertise_address() const { return impl_->advertise_address(); }
const std::string& ControlPlane::name() const { return impl_->name(); }
Result<MembershipView> ControlPlane::WaitForEpoch0(Deadline deadline) { return impl_->WaitForEpoch0(deadline); }
MembershipView ControlPlane::View() const { return impl_->View(); }
uint64_t ControlPlane::Epoch() const { return impl_->Epoch(); }
Status ControlPlane::Failure() const { return impl_->Failure(); }
bool ControlPlane::Removed() const { return impl_->Removed(); }
std::string ControlPlane::ExpelledSelf() const { return impl_->ExpelledSelf(); }
std::shared_ptr<const NodeCredentials> ControlPlane::Credentials() const { return impl_->credentials(); }
std::vector<std::string> ControlPlane::RejoinAddresses() const { return impl_->RejoinAddresses(); }
void ControlPlane::OnViewChange(std::function<void(const MembershipView&)> callback) {
  impl_->OnViewChange(std::move(callback));
}
Result<MembershipView> ControlPlane::WaitForEpochAbove(uint64_t epoch, Deadline deadline) {
  return impl_->WaitForEpochAbove(epoch, deadline);
}
Status ControlPlane::Barrier(const std::string& name, uint64_t epoch, Deadline deadline,
                             std::vector<std::string>* missing) {
  return impl_->BarrierWhileTraining(name, epoch, deadline, 1, missing);
}
Status ControlPlane::BarrierWhileTraining(const std::string& name, uint64_t epoch, Deadline deadline, int windows,
                                          std::vector<std::string>* missing) {
  return impl_->BarrierWhileTraining(name, epoch, deadline, windows, missing);
}
Result<MembershipView> ControlPlane::AdvanceEpochIfPending(Deadline deadline, int64_t proposal, int64_t* agreed) {
  int64_t ignored = 0;
  return impl_->AdvanceEpochIfPending(deadline, proposal, agreed != nullptr ? agreed : &ignored);
}
std::vector<std::string> ControlPlane::PendingJoiners() const { return impl_->PendingJoiners(); }
Status ControlPlane::Leave(Deadline deadline, LeaveKind kind) { return impl_->Leave(deadline, kind); }
void ControlPlane::ReportProgress(int64_t step, int64_t next_admission_step) {
  impl_->ReportProgress(step, next_admission_step);
}
void ControlPlane::ReportSamples(uint64_t samples) { impl_->ReportSamples(samples); }
uint64_t ControlPlane::ClusterSamples() const { return impl_->ClusterSamples(/*extrapolate=*/false); }
uint64_t ControlPlane::ClusterSamplesEstimate() const { return impl_->ClusterSamples(/*extrapolate=*/true); }
std::map<std::string, uint64_t> ControlPlane::SampleCounts() const { return impl_->SampleCounts(); }
void ControlPlane::MergeSampleCounts(const std::map<std::string, uint64_t>& counts) {
  impl_->MergeSampleCounts(counts);
}
void ControlPlane::AdmitOnItsOwn(uint64_t until_samples) { impl_->AdmitOnItsOwn(until_samples); }
void ControlPlane::Expel(const std::string& name, const std::string& why) { impl_->Expel(name, why); }
void ControlPlane::RequestReform(uint64_t epoch) { impl_->RequestReform(epoch); }
bool ControlPlane::EveryMemberAnswers(uint64_t epoch) const { return impl_->EveryMemberAnswers(epoch); }
void ControlPlane::DeclareUnresponsive(const std::string& name, const std::string& why) {
  impl_->DeclareUnresponsive(name, why);
}

// ---------------------------------------------------------------------------
// Start-up and shutdown

ControlPlaneImpl::ControlPlaneImpl(const ClusterConfig& config, Member self, VersionInfo versions,
                                   std::shared_ptr<const NodeCredentials> credentials)
    : config_(config),
      self_(std::move(self)),
      incarnation_(NewIncarnation(self_.name)),
      versions_(std::move(versions)),
      key_(std::make_shared<const ClusterKey>(ClusterKey::FromToken(config.token))),
      credentials_(std::move(credentials)),
      heartbeat_interval_(SecondsToDuration(config.heartbeat_interval_s)),
      join_timeout_(SecondsToDuration(config.join_timeout_s)),
      suspect_after_(SecondsToDuration(config.suspect_timeout_s)),
      dead_after_(SecondsToDuration(config.dead_timeout_s)),
      acceptor_(io_),
      tick_timer_(io_),
      join_timer_(io_),
      join_retry_timer_(io_),
      shutdown_timer_(io_),
      liveness_(SecondsToDuration(config.suspect_timeout_s), SecondsToDuration(config.dead_timeout_s)) {
  // A handshake gets as long as a member may stay silent, and at least 2 s.
  conn_options_.handshake_timeout =
      std::max<Duration>(SecondsToDuration(config.dead_timeout_s), std::chrono::seconds(2));
  accusation_cluster_ = key_->Tag("chorus accusations");
}

// What is still queued on a connection (a Leave sent the moment before the
// node quits) goes out before the control thread stops: stopping at once lost
// it, and a peer waited for the leaver until the dead timeout (8 nodes leaving
// at once: about one launch in 40).
ControlPlaneImpl::~ControlPlaneImpl() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    Locked([this] {
      CloseAll();
      tick_timer_.cancel();
      shutting_down_ = true;
      if (conns_.empty()) {
        io_.stop();
        return;
      }
      shutdown_timer_.expires_after(kShutdownFlushTime);
      shutdown_timer_.async_wait([this](const asio::error_code&) { io_.stop(); });
    });
  });
  thread_.join();
}

// Serves a socket someone else bound and set listening (chorus launch).
Status ControlPlaneImpl::AdoptListener(int fd, uint16_t expected_port) {
  const std::string what = "the listening socket handed over (fd " + std::to_string(fd) + ")";
  int listening = 0;
  socklen_t len = sizeof(listening);
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof(addr);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, what);
  }
  asio::error_code ec;
  if (listening && (addr.ss_family == AF_INET || addr.ss_family == AF_INET6)) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    acceptor_.assign(addr.ss_family == AF_INET ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), fd, ec);
  }
  if (!acceptor_.is_open()) {  // from here on the acceptor owns it
    close(fd);
    return ec ? Unavailable(what + ": " + ec.message())
              : InvalidArgument(what + " is not a listening TCP/IP socket");
  }
  const uint16_t port = acceptor_.local_endpoint(ec).port();
  if (!ec && expected_port != 0 && port != expected_port) {
    return InvalidArgument("cluster.listen=" + config_.listen + " but " + what + " listens on port " +
                           std::to_string(port));
  }
  if (ec) return Unavailable(what + ": " + ec.message());
  return Status::Ok();
}

Status ControlPlaneImpl::Listen(int listen_fd) {
  Result<HostPort> listen = ParseHostPort(config_.listen);
  if (!listen) {
    if (listen_fd >= 0) close(listen_fd);
    return listen.error().WithContext("cluster.listen");
  }
  asio::error_code ec;
  asio::ip::address address;
  if (listen_fd >= 0) {
    CHORUS_RETURN_IF_ERROR(AdoptListener(listen_fd, listen->port));
    address = acceptor_.local_endpoint(ec).address();
  } else {
    address = asio::ip::make_address(listen->host, ec);
    if (ec) {
      asio::ip::tcp::resolver resolver(io_);
      auto results = resolver.resolve(listen->host, std::to_string(listen->port), ec);
      if (ec || results.empty()) {
        return InvalidArgument("cluster.listen=" + config_.listen + ": cannot resolve '" + listen->host +
                               "': " + ec.message());
      }
      address = results.begin()->endpoint().address();
    }
    asio::ip::tcp::endpoint endpoint(address, listen->port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Unavailable("cluster.listen=" + config_.listen + ": cannot listen: " + ec.message());
    }
  }
  port_ = acceptor_.local_endpoint(ec).port();
  listen_display_ = JoinHostPort(address.to_string(), port_);

  if (config_.advertise.empty()) {
    const std::string host = address.is_unspecified() ? HostName() : listen->host;
    advertise_ = JoinHostPort(host, port_);
  } else {
    Result<HostPort> adv = ParseHostPort(config_.advertise);
    if (!adv) return adv.error().WithContext("cluster.advertise");
    advertise_ = JoinHostPort(adv->host, adv->port == 0 ? port_ : adv->port);
  }
  self_.control_address = advertise_;
  CHORUS_LOG_INFO(Subsys::kControl, "node ", self_.name, " listening on ", listen_display_,
                  listen_fd >= 0 ? ", a socket handed over by the launcher" : "", " (advertised as ",
                  advertise_, "); ", versions_.Describe());
  if (config_.token.empty()) {
    CHORUS_LOG_WARN(Subsys::kControl,
                    "cluster.token is empty: any process that can reach ", advertise_, " can join");
  }
  return Status::Ok();
}

void ControlPlaneImpl::StartThread() {
  work_.emplace(asio::make_work_guard(io_));
  asio::post(io_, [this] {
    Locked([this] {
      StartAccept();
      last_tick_ = Clock::now();
      StartTick();
    });
  });
  thread_ = std::thread([this] { io_.run(); });
}

Status ControlPlaneImpl::SelfCheck() {
  const Deadline deadline = Deadline::After(std::clamp<Duration>(join_timeout_, std::chrono::seconds(1),
                                                                  std::chrono::seconds(5)));
  Result<ProbeResult> probe = ProbeNode(advertise_, config_.token, versions_, self_.name, deadline, credentials_);
  if (!probe) {
    return FailedPrecondition("self-check failed: this node cannot complete a hello with its own advertised "
                              "address " + advertise_ + " (" + probe.error().ToString() +
                              "); set cluster.advertise to an address of this host that the other nodes "
                              "(and this one) can reach");
  }
  if (probe->peer_name != self_.name) {
    return FailedPrecondition("self-check failed: the advertised address " + advertise_ +
                              " is answered by another node, '" + probe->peer_name +
                              "'; set cluster.advertise to this node's own address");
  }
  return Status::Ok();
}

void ControlPlaneImpl::Begin() {
  asio::post(io_, [this] {
    Locked([this] {
      BeginForming();
      cv_.notify_all();
    });
  });
}

std::string_view ControlPlaneImpl::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "starting";
    case Phase::kJoining: return "joining";
    case Phase::kWaiting: return "waiting";
    case Phase::kMember: return "member";
    case Phase::kLeaving: return "leaving";
    case Phase::kLeft: return "left";
    case Phase::kRemoved: return "removed";
    case Phase::kFailed: return "failed";
  }
  return "?";
}

void ControlPlaneImpl::StartAccept() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    Locked([&] {
      if (ec) {
        CHORUS_LOG_WARN(Subsys::kControl, "accepting on ", listen_display_, ": ", ec.message());
      } else if (!Terminal()) {
        auto conn = Connection::Create(std::move(socket), Connection::Role::kAcceptor, key_,
                                       HandshakeIdentity{versions_, self_.name, credentials_}, conn_options_, this);
        conns_.insert(conn);
        conn->Start();
      }
    });
    if (ec) {
      // Out of descriptors and similar: try again a little later instead of spinning.
      auto retry = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
      retry->async_wait([this, retry](const asio::error_code&) { Locked([this] { StartAccept(); }); });
    } else {
      Locked([this] { StartAccept(); });
    }
  });
}

void ControlPlaneImpl::StartTick() {
  tick_timer_.expires_after(heartbeat_interval_);
  tick_timer_.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    Locked([this] { OnTick(); });
    StartTick();
  });
}

void ControlPlaneImpl::RefuseAfterTheRun(const std::shared_ptr<Connection>& conn, const std::string& joiner) {
  CHORUS_LOG_INFO(Subsys::kControl, "the run ended before ", joiner, " was admitted: telling it so");
  conn->Send(msg::Reject{RejectCode::kRunEnded, self_.name + " ended its run with the cluster at epoch " +
                                                    std::to_string(view_.epoch)});
  conn->CloseAfterFlush(Status::Ok());
}

void ControlPlaneImpl::Fail(const Status& status, LogLevel level) {
  if (Terminal()) return;
  EndAs(Phase::kFailed, status);
  LogParts(level, Subsys::kControl, self_.name, ": ", status.ToString());
  CloseAll();
  cv_.notify_all();
}

void ControlPlaneImpl::CloseAll() {
  asio::error_code ec;
  acceptor_.close(ec);
  join_timer_.cancel();
  join_retry_timer_.cancel();
  for (const auto& conn : std::vector<std::shared_ptr<Connection>>(conns_.begin(), conns_.end())) {
    conn->CloseAfterFlush(Status::Ok());
  }
  peers_.clear();
  outbox_.clear();
  applicants_.clear();
  join_conn_.reset();
  probes_.clear();
  split_probes_.clear();
}

// ---------------------------------------------------------------------------
// Connections

void ControlPlaneImpl::OnEstablished(const std::shared_ptr<Connection>& conn) {
  Locked([&] {
    if (conn == join_conn_) {
      conn->Send(msg::Join{self_, shared_settings_, resume_});
      return;
    }
    if (probes_.count(conn->id())) {
      OnProbeEstablished(conn);
      return;
    }
    if (split_probes_.count(conn->id())) {
      msg::StateRequest request;  // as a tool asks: nothing to learn from us
      request.sender = self_.name;
      conn->Send(request);
      return;
    }
    auto dialed = dialed_member_.find(conn->id());
    if (dialed != dialed_member_.end()) {
      if (conn->peer_name() != dialed->second) {
        conn->Close(FailedPrecondition("dialed member " + dialed->second + " but " + conn->Describe() +
                                       " answered"));
        return;
      }
      RegisterPeer(dialed->second, conn);
      // The accepting side takes the connection for ours once a member's
      // message arrives on it: say something at once.
      conn->Send(msg::Heartbeat{view_.epoch, self_.name});
      return;
    }
    // Accepted: a member reconnecting to us, or a stranger (a probe or a
    // join, possibly under a member's name: a restarted process). It becomes
    // the member's connection with the first member's message (OnMessage);
    // registering a probe would report the member lost when the probe closes.
  });
}

void ControlPlaneImpl::RegisterPeer(const std::string& name, const std::shared_ptr<Connection>& conn) {
  peers_[name] = conn;
  liveness_.Heard(name, Clock::now());
  auto out = outbox_.find(name);
  if (out != outbox_.end()) {
    for (const ControlMessage& m : out->second) conn->Send(m);
    outbox_.erase(out);
  }
}

void ControlPlaneImpl::OnMessage(const std::shared_ptr<Connection>& conn, ControlMessage message) {
  Locked([&] {
    if (Terminal()) return;
    const std::string& sender = conn->peer_name();
    // Probes, joins and their answers also come from processes that are not
    // members (yet), even under a member's name.
    const bool member_message =
        !std::holds_alternative<msg::StateRequest>(message) && !std::holds_alternative<msg::Join>(message) &&
        !std::holds_alternative<msg::State>(message) && !std::holds_alternative<msg::Redirect>(message) &&
        !std::holds_alternative<msg::Reject>(message);
    // The first member's message makes a connection the member's, replacing
    // an older one (which may be half-open), as accepting it used to.
    const bool first = member_message && member_conns_.insert(conn->id()).second;
    if (formed_ && member_message && sender != self_.name && view_.Find(sender)) {
      liveness_.Heard(sender, Clock::now());
      const bool may_register = !Gone(sender) || LeaveOwedTo(sender);
      if (may_register && (first || !peers_.count(sender))) RegisterPeer(sender, conn);
    }
    Dispatch(conn, std::move(message));
  });
}

void ControlPlaneImpl::OnClosed(const std::shared_ptr<Connection>& conn, const Status& reason) {
  Locked([&] {
    conns_.erase(conn);
    member_conns_.erase(conn->id());
    if (shutting_down_) {
      if (conns_.empty()) io_.stop();
      return;
    }
    std::string dialed;  // the member this connection was dialed to, if it closed before it was registered
    if (auto d = dialed_member_.find(conn->id()); d != dialed_member_.end()) {
      dialed = d->second;
      dialed_member_.erase(d);
    }
    const std::string& name = conn->peer_name();
    auto peer = peers_.find(name);
    if (peer != peers_.end() && peer->second == conn) {
      dialed.clear();
      peers_.erase(peer);
      if ((phase_ == Phase::kMember || phase_ == Phase::kLeaving) && view_.Find(name) && !Gone(name)) {
        CHORUS_LOG_INFO(Subsys::kControl, "lost the connection to member ", conn->Describe(),
                        reason.ok() ? std::string() : ": " + reason.message());
        to_report_failures_.push_back({name, view_.Find(name)->rank, MemberFailure::Kind::kConnectionLost});
        liveness_.ConnectionLost(name);
        // A process that died closed its listener with this connection: a dial
        // now is refused at once, where one at the next tick costs a tick.
        DialMember(*view_.Find(name));
      }
    }
    // A dial that connected as the member's process died (the OnClosed dial
    // above waits for it: one dial at a time) is reset during the handshake.
    // That is a lost connection too: dial again, where a refusal tells, or
    // the death waits for the next tick.
    if (!dialed.empty() && reason.code() == StatusCode::kUnavailable &&
        (phase_ == Phase::kMember || phase_ == Phase::kLeaving) && view_.Find(dialed) && !Gone(dialed) &&
        !peers_.count(dialed)) {
      liveness_.ConnectionLost(dialed);
      RedialSoon(dialed);
    }
    bool applicant_gone = false;
    for (auto it = applicants_.begin(); it != applicants_.end();) {
      if (it->conn == conn) {
        CHORUS_LOG_INFO(Subsys::kControl, "applicant ", it->info.name, " disconnected before admission");
        it = applicants_.erase(it);
        applicant_gone = true;
      } else {
        ++it;
      }
    }
    if (applicant_gone && !formed_) TellApplicants();
    if (conn == join_conn_) OnJoinConnectionClosed(conn, reason);
    if (probes_.count(conn->id())) OnProbeClosed(conn, reason);
    if (auto split = split_probes_.find(conn->id()); split != split_probes_.end()) {
      if (auto d = departed_.find(split->second); d != departed_.end()) d->second.probing = false;
      split_probes_.erase(split);
    }
    // Leaving, a member that left closed the connection our Leave waited for:
    // it no longer listens, so nothing waits for that Leave.
    if (phase_ == Phase::kLeaving && left_.count(name) && !peers_.count(name)) outbox_.erase(name);
    cv_.notify_all();
  });
}

void ControlPlaneImpl::SendTo(const std::string& name, const ControlMessage& message, bool queue) {
  auto peer = peers_.find(name);
  if (peer != peers_.end() && peer->second->established()) {
    peer->second->Send(message);
    return;
  }
  for (const Applicant& a : applicants_) {
    if (a.info.name == name && a.conn->established()) {
      a.conn->Send(message);
      return;
    }
  }
  if (queue) {
    auto& box = outbox_[name];
    if (box.size() < kMaxOutbox) box.push_back(message);
  }
}

msg::State ControlPlaneImpl::BuildState() const {
  msg::State state;
  state.formed = formed_;
  state.epoch = view_.epoch;
  state.members = view_.members;
  for (const Applicant& a : applicants_) state.pending.push_back(a.info.name);
  state.coordinator = formed_ ? ExpectedCoordinator() : (founder_ ? self_.name : std::string());
  state.address = advertise_;
  if (!formed_) {
    state.candidate = founder_ && phase_ == Phase::kWaiting;
    if (phase_ == Phase::kWaiting && !founder_) {
      state.applied_to = applied_address_;
      state.applied_formed = applied_state_.formed;
    }
    state.known = KnownAddresses();
  } else {
    state.step = progress_step_;
    state.next_admission_step = progress_next_admission_;
    state.data_salt = view_.data_salt;
    state.reform = view_.reform;
  }
  return state;
}

// ---------------------------------------------------------------------------
// Public API

Result<MembershipView> ControlPlaneImpl::WaitForEpoch0(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitUntil(lock, deadline, [&] {
    return Terminal() || (formed_ && (phase_ == Phase::kMember || phase_ == Phase::kLeaving));
  });
  if (formed_ && (phase_ == Phase::kMember || phase_ == Phase::kLeaving)) return view_;
  if (phase_ == Phase::kFailed || phase_ == Phase::kRemoved) return Err(failure_);
  if (phase_ == Phase::kLeft) return Err(FailedPrecondition(self_.name + " has left the cluster"));
  return Err(DeadlineExceeded(self_.name + ": not a cluster member by the deadline (" + FormingReport() + ")"));
}

MembershipView ControlPlaneImpl::View() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

uint64_t ControlPlaneImpl::Epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_.epoch;
}

void ControlPlaneImpl::EndAs(Phase phase, Status why) {
  phase_ = phase;
  failure_ = std::move(why);
  failed_.store(true, std::memory_order_release);
}

bool ControlPlaneImpl::Removed() const {
  if (!failed_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return phase_ == Phase::kRemoved;
}

std::vector<std::string> ControlPlaneImpl::RejoinAddresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (!yielded_to_.empty()) out.push_back(yielded_to_);
  for (const Member& m : view_.members) {
    if (m.name != self_.name && !m.control_address.empty() &&
        std::find(out.begin(), out.end(), m.control_address) == out.end()) {
      out.push_back(m.control_address);
    }
  }
  return out;
}

Status ControlPlaneImpl::Failure() const {
  // Asked once a training step: the flag spares the step the mutex, which the
  // control thread holds through its handlers.
  if (!failed_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return phase_ == Phase::kRemoved || phase_ == Phase::kFailed ? failure_ : Status::Ok();
}

void ControlPlane::OnMemberFailure(std::function<void(const MemberFailure&)> callback) {
  impl_->OnMemberFailure(std::move(callback));
}

void ControlPlaneImpl::OnMemberFailure(std::function<void(const MemberFailure&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_callbacks_.push_back(std::move(callback));
}

void ControlPlaneImpl::OnViewChange(std::function<void(const MembershipView&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.push_back(std::move(callback));
}

Result<MembershipView> ControlPlaneImpl::WaitForEpochAbove(uint64_t epoch, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitUntil(lock, deadline, [&] { return Terminal() || (formed_ && view_.epoch > epoch); });
  if (phase_ == Phase::kFailed || phase_ == Phase::kRemoved) return Err(failure_);
  if (formed_ && view_.epoch > epoch && phase_ != Phase::kLeft) return view_;
  if (phase_ == Phase::kLeft) return Err(FailedPrecondition(self_.name + " has left the cluster"));
  return Err(DeadlineExceeded(self_.name + ": no epoch above " + std::to_string(epoch) +
                              " by the deadline (still at epoch " + std::to_string(view_.epoch) + ")"));
}

void ControlPlaneImpl::ReportProgress(int64_t step, int64_t next_admission_step) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_step_ = step;
  progress_next_admission_ = next_admission_step;
}

std::vector<std::string> ControlPlaneImpl::PendingJoiners() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  if (formed_) {
    for (const Applicant& a : applicants_) names.push_back(a.info.name);
  }
  return names;
}

Status ControlPlaneImpl::BarrierWhileTraining(const std::string& name, uint64_t epoch, Deadline deadline,
                                              int windows, std::vector<std::string>* missing) {
  bool advance_seen = false;
  int64_t agreed = 0;
  return BarrierInternal(name, epoch, false, 0, deadline, &advance_seen, &agreed, missing, windows);
}

Result<MembershipView> ControlPlaneImpl::AdvanceEpochIfPending(Deadline deadline, int64_t proposal,
                                                              int64_t* agreed) {
  *agreed = -1;
  uint64_t epoch = 0;
  bool announce = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::kMember) {
      return Err(FailedPrecondition(self_.name + " is not a cluster member (" +
                                    std::string(PhaseName(phase_)) + ")"));
    }
    epoch = view_.epoch;
    announce = IsCoordinator() && !applicants_.empty();
  }
  bool advance = false;
  int64_t value = -1;
  Status arrived = BarrierInternal("chorus.epoch-boundary", epoch, announce, proposal, deadline, &advance, &value);
  if (!arrived.ok()) {
    // The coordinator may commit the next epoch (with the joiners) before this
    // member has seen the barrier complete: that epoch is the boundary's result.
    MembershipView now = View();
    if (arrived.code() == StatusCode::kAborted && now.epoch > epoch && now.self_rank >= 0) return now;
    return Err(arrived);
  }
  if (!advance) {
    *agreed = value;  // every member saw the same arrivals
    return View();
  }
  if (announce) {
    asio::post(io_, [this] {
      Locked([this] {
        advance_requested_ = true;
        MaybePropose();
      });
    });
  }
  return WaitForEpochAbove(epoch, deadline);
}

Status ControlPlaneImpl::Leave(Deadline deadline, LeaveKind kind) {
  std::unique_lock<std::mutex> lock(mu_);
  if (phase_ == Phase::kStarting || phase_ == Phase::kJoining || phase_ == Phase::kWaiting) {
    CHORUS_LOG_INFO(Subsys::kControl, self_.name, " leaves before becoming a member");
    phase_ = Phase::kLeft;
    asio::post(io_, [this] { Locked([this] { CloseAll(); }); });
    cv_.notify_all();
    return Status::Ok();
  }
  if (phase_ != Phase::kMember) return Status::Ok();  // already gone (left, removed, failed)
  phase_ = Phase::kLeaving;
  const uint64_t epoch = view_.epoch;
  const bool stopping = kind == LeaveKind::kStopping;
  // The run's end is the cluster's (the epochs count the cluster's samples,
  // and Exchange::Finish is collective): no admission point comes any more.
  run_ended_ = !stopping;
  CHORUS_LOG_INFO(Subsys::kControl, self_.name, " leaves the cluster at epoch ", epoch,
                  stopping ? " before the end of its run" : "");
  // The Leave goes to members that left too: one that left before us may still
  // wait for it. When all leave at once, a coordinator that left can install
  // the epoch it proposed and keep waiting for the members in it (8 nodes
  // leaving at once: one launch in about 36 ran into the dead timeout when
  // only members not gone were told). One that has gone no longer listens:
  // the failed dial or the closed connection clears its outbox.
  asio::post(io_, [this, epoch, stopping] {
    Locked([&] {
      // Joiners waiting here for an admission point are told that none comes:
      // left to find nobody, one that may form alone (cluster.min_nodes = 1)
      // would train a replica of its own from scratch. An applicant the view
      // names already (a founding member whose Welcome is on its way, when
      // the founder leaves the moment epoch 0 is fixed) is a member: it gets
      // the Leave as every member does.
      if (!stopping) {
        for (const Applicant& a : applicants_) {
          if (view_.Find(a.info.name) == nullptr) RefuseAfterTheRun(a.conn, a.info.name);
        }
        applicants_.clear();
      }
      for (const Member& m : view_.members) {
        if (m.name != self_.name && !dead_.count(m.name)) {
          SendTo(m.name, msg::Leave{epoch, self_.name, stopping}, true);
        }
      }
      DialForOutbox();
    });
  });
  // Done when every other member has left or died and our Leave reached each
  // one not dead: when all nodes leave at once, a node that quit with its
  // Leave still queued (its connection not yet up) left a peer waiting for it
  // until the dead timeout (`chorus launch -n 8 --command cluster -- --hold 0`
  // exited after 6-8 s instead of 1.3 s, about one run in ten).
  const bool confirmed = WaitUntil(lock, deadline, [&] {
    return phase_ != Phase::kLeaving || (OthersAllGone() && OutboxDelivered());
  });
  const bool removed_elsewhere = phase_ == Phase::kRemoved;
  phase_ = Phase::kLeft;
  cv_.notify_all();
  asio::post(io_, [this] { Locked([this] { CloseAll(); }); });
  if (removed_elsewhere) return Status::Ok();
  if (!confirmed) {
    return DeadlineExceeded(self_.name + " left epoch " + std::to_string(epoch) +
                            " without the others confirming in time; they will find it dead");
  }
  return Status::Ok();
}

}  // namespace chorus::node
