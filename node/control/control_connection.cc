// Asio connection with the control-plane handshake (see control_connection.h).
//
// Handshake, with K the cluster key (control_auth.h), E the ephemeral X25519
// keys and C the per-node credentials (credentials.h; only with cluster.issuer):
//   dialer   -> acceptor  hello{versions, name, Nd, Ed, Cd}                   MAC: handshake key d->a
//   acceptor -> dialer    hello{versions, name, Na, proof(Nd), Ea, Ca, sig_a} MAC: handshake key a->d
//                         or reject{code, reason}
//   dialer   -> acceptor  proof{proof(Na), sig_d}                             MAC: session key d->a
// then both directions use session keys derived from (K, Nd, Na, DH(Ed, Ea)).
// sig_a and sig_d sign the transcript (nonces, ephemeral keys, names) with
// the credentials' keys; the acceptor refuses a dialer whose credential is
// not the issuer's before it answers (kCredentialRefused). A hello that does
// not verify is answered with a reject (authenticated with the acceptor's
// key, which a dialer with another token cannot verify; it still reports the
// reason, marked as unauthenticated).
#include "node/control/control_connection.h"

#include <sodium.h>

#include <atomic>
#include <sstream>

#include "common/log.h"
#include "node/config/host_port.h"

namespace chorus::node {
namespace {

std::atomic<uint64_t> g_next_connection_id{1};

std::string EndpointString(const asio::ip::tcp::endpoint& ep) {
  std::ostringstream out;
  if (ep.address().is_v6()) {
    out << '[' << ep.address().to_string() << "]:" << ep.port();
  } else {
    out << ep.address().to_string() << ':' << ep.port();
  }
  return out.str();
}

// Peer faults are warnings; ordinary ends (peer closed, local close) are debug
// lines: the control plane logs what a lost member means.
bool IsPeerFault(const Status& s) {
  switch (s.code()) {
    case StatusCode::kPermissionDenied:
    case StatusCode::kDataLoss:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInvalidArgument:
    case StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

Status StatusForReject(RejectCode code, std::string message) {
  switch (code) {
    case RejectCode::kVersionMismatch:
    case RejectCode::kDuplicateName:
    case RejectCode::kSettingsMismatch:
      return FailedPrecondition(std::move(message));
    case RejectCode::kAuthenticationFailed:
    case RejectCode::kExpelled:
    case RejectCode::kCredentialRefused:
      return PermissionDenied(std::move(message));
    case RejectCode::kProtocol:
      return InvalidArgument(std::move(message));
    case RejectCode::kRunEnded:
      return Cancelled(std::move(message));
    case RejectCode::kNotMember:
    case RejectCode::kOther:
      break;
  }
  return Unavailable(std::move(message));
}

}  // namespace

std::shared_ptr<Connection> Connection::Create(asio::ip::tcp::socket socket, Role role,
                                               std::shared_ptr<const ClusterKey> key,
                                               HandshakeIdentity identity, ConnectionOptions options,
                                               Listener* listener) {
  return std::shared_ptr<Connection>(new Connection(std::move(socket), role, std::move(key),
                                                    std::move(identity), options, listener));
}

Connection::Connection(asio::ip::tcp::socket socket, Role role, std::shared_ptr<const ClusterKey> key,
                       HandshakeIdentity identity, ConnectionOptions options, Listener* listener)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      role_(role),
      key_(std::move(key)),
      identity_(std::move(identity)),
      options_(options),
      listener_(listener),
      id_(g_next_connection_id.fetch_add(1)),
      handshake_sealer_(key_->HandshakeKey(role == Role::kDialer ? Direction::kDialerToAcceptor
                                                                  : Direction::kAcceptorToDialer)),
      handshake_opener_(key_->HandshakeKey(role == Role::kDialer ? Direction::kAcceptorToDialer
                                                                  : Direction::kDialerToAcceptor)) {
  asio::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("<unknown peer>") : EndpointString(ep);
  asio::ip::tcp::no_delay nodelay(true);
  socket_.set_option(nodelay, ec);  // best effort: small frames should not wait for Nagle
}

Connection::~Connection() = default;

std::string Connection::Describe() const {
  return peer_name_.empty() ? remote_ : peer_name_ + " (" + remote_ + ")";
}

void Connection::Start() {
  auto self = shared_from_this();
  timer_.expires_after(options_.handshake_timeout);
  timer_.async_wait([self](const asio::error_code& ec) {
    if (ec || self->state_ == State::kEstablished || self->state_ == State::kClosed) return;
    if (self->state_ == State::kFlushing) {
      self->Close(self->close_reason_);
      return;
    }
    self->Close(DeadlineExceeded("handshake with " + self->Describe() + " did not finish within " +
                                 SecondsText(self->options_.handshake_timeout) + " s"));
  });
  if (role_ == Role::kDialer) {
    own_nonce_ = RandomNonce();
    SendRaw(OwnHello({}), handshake_sealer_);
  }
  ReadHeader();
}

void Connection::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_),
                   [self](const asio::error_code& ec, size_t n) {
                     if (self->state_ == State::kClosed || self->state_ == State::kFlushing) return;
                     if (ec) {
                       if (ec == asio::error::eof && n == 0) {
                         self->Close(Unavailable(self->Describe() + " closed the connection"));
                       } else if (ec == asio::error::eof) {
                         self->Close(DataLoss(self->Describe() + " closed the connection inside a frame header (" +
                                              std::to_string(n) + " of 4 bytes)"));
                       } else {
                         self->Close(Unavailable("reading from " + self->Describe() + ": " + ec.message()));
                       }
                       return;
                     }
                     auto length = ParseFrameLength(self->header_, self->options_.max_frame_payload);
                     if (!length) {
                       self->Close(length.error().WithContext("frame from " + self->Describe()));
                       return;
                     }
                     self->ReadBody(*length);
                   });
}

void Connection::ReadBody(uint32_t length) {
  auto self = shared_from_this();
  body_.resize(static_cast<size_t>(length) + kFrameMacBytes);
  asio::async_read(socket_, asio::buffer(body_),
                   [self](const asio::error_code& ec, size_t n) {
                     if (self->state_ == State::kClosed || self->state_ == State::kFlushing) return;
                     if (ec) {
                       if (ec == asio::error::eof) {
                         self->Close(DataLoss(self->Describe() + " closed the connection inside a frame (" +
                                              std::to_string(n) + " of " + std::to_string(self->body_.size()) +
                                              " bytes after the header)"));
                       } else {
                         self->Close(Unavailable("reading from " + self->Describe() + ": " + ec.message()));
                       }
                       return;
                     }
                     self->OnFrame();
                   });
}

void Connection::OnFrame() {
  auto self = shared_from_this();
  std::span<uint8_t> all(body_);
  std::span<uint8_t> payload = all.first(body_.size() - kFrameMacBytes);
  std::span<const uint8_t> mac = all.last(kFrameMacBytes);
  if (state_ != State::kEstablished) {
    OnHandshakeFrame(payload, mac);
  } else {
    Status auth = session_opener_->Open(payload, mac);
    if (!auth.ok()) {
      Close(auth.WithContext("frame from " + Describe()));
      return;
    }
    Result<ControlMessage> message = DecodeMessage(payload);
    if (!message) {
      Close(message.error().WithContext("frame from " + Describe()));
      return;
    }
    if (std::holds_alternative<msg::Hello>(*message) || std::holds_alternative<msg::Proof>(*message)) {
      Close(InvalidArgument("frame from " + Describe() + ": unexpected " +
                            std::string(MessageName(*message)) + " after the handshake"));
      return;
    }
    listener_->OnMessage(self, std::move(*message));
  }
  if (state_ == State::kAwaitProof || state_ == State::kEstablished) ReadHeader();
}

void Connection::OnHandshakeFrame(std::span<uint8_t> payload, std::span<const uint8_t> mac) {
  if (state_ == State::kAwaitHello) {
    if (role_ == Role::kAcceptor) {
      AcceptorOnHello(payload, mac);
    } else {
      DialerOnHello(payload, mac);
    }
  } else if (state_ == State::kAwaitProof) {
    AcceptorOnProof(payload, mac);
  }
}

msg::Hello Connection::OwnHello(std::vector<uint8_t> proof) const {
  msg::Hello hello;
  hello.versions = identity_.versions;
  hello.node_name = identity_.node_name;
  hello.nonce.assign(own_nonce_.begin(), own_nonce_.end());
  hello.proof = std::move(proof);
  hello.ephemeral.assign(ephemeral_.public_key().begin(), ephemeral_.public_key().end());
  if (identity_.credentials) {
    const Credential& c = identity_.credentials->credential();
    hello.credential_key.assign(c.node_key.begin(), c.node_key.end());
    hello.credential_signature.assign(c.issuer_signature.begin(), c.issuer_signature.end());
  }
  return hello;
}

Status Connection::StartSession(const msg::Hello& peer_hello) {
  peer_ephemeral_ = peer_hello.ephemeral;
  Result<SharedSecret> shared = ephemeral_.Shared(peer_ephemeral_);
  if (!shared) return shared.error().WithContext("hello of " + Describe());
  const bool dialer = role_ == Role::kDialer;
  const Nonce& nd = dialer ? own_nonce_ : peer_nonce_;
  const Nonce& na = dialer ? peer_nonce_ : own_nonce_;
  const Direction out = dialer ? Direction::kDialerToAcceptor : Direction::kAcceptorToDialer;
  const Direction in = dialer ? Direction::kAcceptorToDialer : Direction::kDialerToAcceptor;
  session_sealer_.emplace(key_->SessionKey(out, nd, na, *shared), /*encrypt=*/true);
  session_opener_.emplace(key_->SessionKey(in, nd, na, *shared), /*encrypt=*/true);
  sodium_memzero(shared->data(), shared->size());
  // The peer's credential, checked later against the transcript.
  peer_credential_ = Credential{peer_hello.node_name, {}, {}};
  if (peer_hello.credential_key.size() == kSignPublicKeyBytes &&
      peer_hello.credential_signature.size() == kSignatureBytes) {
    std::copy(peer_hello.credential_key.begin(), peer_hello.credential_key.end(), peer_credential_.node_key.begin());
    std::copy(peer_hello.credential_signature.begin(), peer_hello.credential_signature.end(),
              peer_credential_.issuer_signature.begin());
  }
  return Status::Ok();
}

std::vector<uint8_t> Connection::Transcript(Role signer) const {
  static constexpr std::string_view kDomain = "chorus handshake transcript v1";
  const bool dialer = role_ == Role::kDialer;
  const std::string_view label = signer == Role::kDialer ? "dialer" : "acceptor";
  std::vector<uint8_t> t(kDomain.begin(), kDomain.end());
  t.insert(t.end(), label.begin(), label.end());
  auto add = [&t](std::span<const uint8_t> bytes) {
    const uint32_t n = static_cast<uint32_t>(bytes.size());
    for (int i = 0; i < 4; ++i) t.push_back(static_cast<uint8_t>(n >> (8 * i)));
    t.insert(t.end(), bytes.begin(), bytes.end());
  };
  auto text = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const std::span<const uint8_t> own_e(ephemeral_.public_key());
  add(dialer ? std::span<const uint8_t>(own_nonce_) : std::span<const uint8_t>(peer_nonce_));
  add(dialer ? std::span<const uint8_t>(peer_nonce_) : std::span<const uint8_t>(own_nonce_));
  add(dialer ? own_e : std::span<const uint8_t>(peer_ephemeral_));
  add(dialer ? std::span<const uint8_t>(peer_ephemeral_) : own_e);
  add(text(dialer ? identity_.node_name : peer_name_));
  add(text(dialer ? peer_name_ : identity_.node_name));
  return t;
}

bool Connection::IssuedCredential() {
  const Status issued = identity_.credentials->CheckIssued(peer_credential_, peer_name_);
  if (issued.ok()) return true;
  RejectAndClose(RejectCode::kCredentialRefused,
                 identity_.node_name + " refuses you: " + issued.message() +
                     " (this cluster admits only nodes with a credential of its issuer: cluster.issuer, "
                     "cluster.credential)",
                 issued.WithContext("refusing " + Describe() + " (cluster.issuer)"));
  return false;
}

std::vector<uint8_t> Connection::SignTranscript() const {
  if (!identity_.credentials) return {};
  const Signature s = identity_.credentials->Sign(Transcript(role_));
  return std::vector<uint8_t>(s.begin(), s.end());
}

Status Connection::CheckPeerCredential(std::span<const uint8_t> transcript_signature) const {
  if (!identity_.credentials) return Status::Ok();
  const Role peer_role = role_ == Role::kDialer ? Role::kAcceptor : Role::kDialer;
  return identity_.credentials->CheckPeer(peer_credential_, peer_name_, transcript_signature,
                                          Transcript(peer_role));
}

bool Connection::TakePeerHello(const msg::Hello& hello) {
  peer_name_ = hello.node_name;
  peer_versions_ = hello.versions;
  const Status versions = CheckVersions(identity_.versions, hello.versions, Describe());
  if (versions.ok()) return true;
  RejectAndClose(RejectCode::kVersionMismatch,
                 "version mismatch: " + identity_.node_name + " runs " + identity_.versions.Describe() +
                     "; you run " + hello.versions.Describe(),
                 versions);
  return false;
}

void Connection::AcceptorOnHello(std::span<uint8_t> payload, std::span<const uint8_t> mac) {
  const Status auth = handshake_opener_.Open(payload, mac);
  Result<ControlMessage> decoded = DecodeMessage(payload);
  const msg::Hello* hello = decoded ? std::get_if<msg::Hello>(&*decoded) : nullptr;
  if (!auth.ok()) {
    const std::string who = hello ? "'" + hello->node_name + "' at " + remote_ : remote_;
    RejectAndClose(RejectCode::kAuthenticationFailed,
                   "authentication failed: " + identity_.node_name +
                       " cannot verify your hello under its cluster token (cluster.token differs)",
                   PermissionDenied("refusing " + who +
                                    ": its hello does not verify under our cluster token "
                                    "(different cluster.token?)"));
    return;
  }
  if (!decoded) {
    Close(decoded.error().WithContext("hello from " + remote_));
    return;
  }
  if (!hello) {
    RejectAndClose(RejectCode::kProtocol,
                   "expected hello, got " + std::string(MessageName(*decoded)),
                   InvalidArgument(remote_ + " sent " + std::string(MessageName(*decoded)) +
                                   " before its hello"));
    return;
  }
  if (!TakePeerHello(*hello)) return;
  if (hello->nonce.size() != kNonceBytes) {
    RejectAndClose(RejectCode::kProtocol, "hello nonce must be 32 bytes",
                   InvalidArgument("hello from " + Describe() + " has a nonce of " +
                                   std::to_string(hello->nonce.size()) + " bytes"));
    return;
  }
  std::copy(hello->nonce.begin(), hello->nonce.end(), peer_nonce_.begin());
  own_nonce_ = RandomNonce();
  if (Status session = StartSession(*hello); !session.ok()) {
    RejectAndClose(RejectCode::kProtocol, session.message(), InvalidArgument(session.message()));
    return;
  }
  if (identity_.credentials && !IssuedCredential()) return;
  const Mac proof = key_->ProveNonce(Direction::kAcceptorToDialer, peer_nonce_);
  msg::Hello reply = OwnHello(std::vector<uint8_t>(proof.begin(), proof.end()));
  reply.transcript_signature = SignTranscript();
  SendRaw(reply, handshake_sealer_);
  state_ = State::kAwaitProof;
}

void Connection::DialerOnHello(std::span<uint8_t> payload, std::span<const uint8_t> mac) {
  const Status auth = handshake_opener_.Open(payload, mac);
  Result<ControlMessage> decoded = DecodeMessage(payload);
  if (!auth.ok()) {
    const msg::Reject* reject = decoded ? std::get_if<msg::Reject>(&*decoded) : nullptr;
    if (reject) {
      Close(PermissionDenied("refused by " + remote_ + ": " + reject->reason +
                             " (that refusal does not verify under our token either: the cluster tokens "
                             "differ)"));
    } else {
      Close(PermissionDenied("the handshake reply of " + remote_ +
                             " does not verify under our cluster token (different cluster.token?)"));
    }
    return;
  }
  if (!decoded) {
    Close(decoded.error().WithContext("handshake reply from " + remote_));
    return;
  }
  if (const auto* reject = std::get_if<msg::Reject>(&*decoded)) {
    Close(StatusForReject(reject->code, "refused by " + remote_ + ": " + reject->reason));
    return;
  }
  const auto* hello = std::get_if<msg::Hello>(&*decoded);
  if (!hello) {
    Close(InvalidArgument(remote_ + " answered our hello with " + std::string(MessageName(*decoded))));
    return;
  }
  if (!TakePeerHello(*hello)) return;
  if (hello->nonce.size() != kNonceBytes ||
      !key_->CheckNonceProof(Direction::kAcceptorToDialer, own_nonce_, hello->proof)) {
    Close(PermissionDenied(Describe() + " did not prove that it holds the cluster key"));
    return;
  }
  std::copy(hello->nonce.begin(), hello->nonce.end(), peer_nonce_.begin());
  if (Status session = StartSession(*hello); !session.ok()) {
    Close(InvalidArgument(session.message()));
    return;
  }
  if (Status credential = CheckPeerCredential(hello->transcript_signature); !credential.ok()) {
    Close(credential.WithContext("refusing " + Describe() + " (cluster.issuer)"));
    return;
  }
  const Mac proof = key_->ProveNonce(Direction::kDialerToAcceptor, peer_nonce_);
  SendRaw(msg::Proof{std::vector<uint8_t>(proof.begin(), proof.end()), SignTranscript()}, *session_sealer_);
  Established();
}

void Connection::AcceptorOnProof(std::span<uint8_t> payload, std::span<const uint8_t> mac) {
  const Status auth = session_opener_->Open(payload, mac);
  if (!auth.ok()) {
    Close(PermissionDenied("the handshake proof of " + Describe() +
                           " does not verify (different cluster.token, or a replayed hello)"));
    return;
  }
  Result<ControlMessage> decoded = DecodeMessage(payload);
  if (!decoded) {
    Close(decoded.error().WithContext("handshake proof from " + Describe()));
    return;
  }
  const auto* proof = std::get_if<msg::Proof>(&*decoded);
  if (!proof || !key_->CheckNonceProof(Direction::kDialerToAcceptor, own_nonce_, proof->proof)) {
    Close(PermissionDenied(Describe() + " did not prove that it holds the cluster key"));
    return;
  }
  if (Status credential = CheckPeerCredential(proof->transcript_signature); !credential.ok()) {
    Close(credential.WithContext("refusing " + Describe() + " (cluster.issuer)"));
    return;
  }
  Established();
}

void Connection::Established() {
  state_ = State::kEstablished;
  timer_.cancel();
  listener_->OnEstablished(shared_from_this());
}

void Connection::Send(const ControlMessage& message) {
  if (state_ != State::kEstablished) {
    CHORUS_LOG_DEBUG(Subsys::kControl, "dropping ", MessageName(message), " to ", Describe(),
                     ": connection not established");
    return;
  }
  SendRaw(message, *session_sealer_);
}

void Connection::SendRaw(const ControlMessage& message, FrameSealer& sealer) {
  Result<std::vector<uint8_t>> bytes = EncodeMessage(message);
  if (!bytes) {
    CHORUS_LOG_ERROR(Subsys::kControl, "not sending to ", Describe(), ": ", bytes.error().ToString());
    return;
  }
  if (bytes->size() > options_.max_frame_payload) {
    CHORUS_LOG_ERROR(Subsys::kControl, "not sending ", MessageName(message), " to ", Describe(), ": ",
                     bytes->size(), " bytes is over the frame limit of ", options_.max_frame_payload);
    return;
  }
  if (write_queue_.size() >= options_.max_queued_frames) {
    Close(ResourceExhausted(Describe() + " is not reading: " + std::to_string(write_queue_.size()) +
                            " frames queued"));
    return;
  }
  write_queue_.push_back(sealer.Seal(*bytes));
  WriteNext();
}

void Connection::WriteNext() {
  if (writing_ || state_ == State::kClosed) return;
  if (write_queue_.empty()) {
    if (state_ == State::kFlushing) Close(close_reason_);
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(write_queue_.front()),
                    [self](const asio::error_code& ec, size_t) {
                      self->writing_ = false;
                      if (self->state_ == State::kClosed) return;
                      if (ec) {
                        self->Close(Unavailable("writing to " + self->Describe() + ": " + ec.message()));
                        return;
                      }
                      self->write_queue_.pop_front();
                      self->WriteNext();
                    });
}

void Connection::RejectAndClose(RejectCode code, const std::string& reason, const Status& log_reason) {
  SendRaw(msg::Reject{code, reason}, handshake_sealer_);
  CloseAfterFlush(log_reason);
}

void Connection::CloseAfterFlush(const Status& reason) {
  if (state_ == State::kClosed || state_ == State::kFlushing) return;
  if (write_queue_.empty() && !writing_) {
    Close(reason);
    return;
  }
  state_ = State::kFlushing;
  close_reason_ = reason;
  auto self = shared_from_this();
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([self](const asio::error_code& ec) {
    if (!ec) self->Close(self->close_reason_);
  });
}

void Connection::Close(const Status& reason) {
  if (state_ == State::kClosed) return;
  const bool was_established = state_ == State::kEstablished;
  state_ = State::kClosed;
  close_reason_ = reason;
  if (!reason.ok() && IsPeerFault(reason)) {
    CHORUS_LOG_WARN(Subsys::kControl, "closing connection with ", remote_, ": ", reason.ToString());
  } else {
    CHORUS_LOG_DEBUG(Subsys::kControl, "connection with ", Describe(), " closed",
                     was_established ? "" : " during the handshake",
                     reason.ok() ? std::string() : ": " + reason.ToString());
  }
  asio::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
  if (!notified_closed_) {
    notified_closed_ = true;
    // Posted, not called: Close() may run inside the listener's own handler.
    auto self = shared_from_this();
    asio::post(timer_.get_executor(), [self, reason] { self->listener_->OnClosed(self, reason); });
  }
}

void AsyncDial(asio::io_context& io, const std::string& address, Duration timeout,
               std::function<void(Result<asio::ip::tcp::socket>, bool refused)> done) {
  Result<HostPort> hp = ParseHostPort(address);
  if (!hp) {
    auto error = hp.error().WithContext("dialing '" + address + "'");
    asio::post(io, [done = std::move(done), error] { done(Err(error), false); });
    return;
  }
  struct DialState {
    explicit DialState(asio::io_context& io) : resolver(io), socket(io), timer(io) {}
    asio::ip::tcp::resolver resolver;
    asio::ip::tcp::socket socket;
    asio::steady_timer timer;
    bool finished = false;
    bool timed_out = false;
    std::function<void(Result<asio::ip::tcp::socket>, bool)> done;
    std::string address;
    double timeout_s = 0;
  };
  auto state = std::make_shared<DialState>(io);
  state->done = std::move(done);
  state->address = address;
  state->timeout_s = std::chrono::duration<double>(timeout).count();
  auto finish = [state](Result<asio::ip::tcp::socket> result, bool refused = false) {
    if (state->finished) return;
    state->finished = true;
    state->timer.cancel();
    state->done(std::move(result), refused);
  };
  state->timer.expires_after(timeout);
  state->timer.async_wait([state, finish](const asio::error_code& ec) {
    if (ec || state->finished) return;
    state->timed_out = true;
    state->resolver.cancel();
    asio::error_code ignored;
    state->socket.close(ignored);
    finish(Err(Unavailable("connecting to " + state->address + ": no answer within " +
                           SecondsText(state->timeout_s) + " s")));
  });
  state->resolver.async_resolve(
      hp->host, std::to_string(hp->port),
      [state, finish](const asio::error_code& ec, asio::ip::tcp::resolver::results_type results) {
        if (state->finished) return;
        if (ec) {
          finish(Err(Unavailable("resolving " + state->address + ": " + ec.message())));
          return;
        }
        asio::async_connect(state->socket, results,
                            [state, finish](const asio::error_code& ec, const asio::ip::tcp::endpoint&) {
                              if (state->finished) return;
                              if (ec) {
                                finish(Err(Unavailable("connecting to " + state->address + ": " +
                                                       ec.message())),
                                       ec == asio::error::connection_refused);
                                return;
                              }
                              finish(std::move(state->socket));
                            });
      });
}

}  // namespace chorus::node
