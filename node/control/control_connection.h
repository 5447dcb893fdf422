// One authenticated control-plane TCP connection (standalone Asio).
//
// A Connection reads frames (control_frame.h), runs the handshake
// (control_auth.h: hellos with nonces, version check, nonce proofs, session
// keys) and then hands each decoded message to its Listener. Every failure of
// the peer - a frame over the size limit, a MAC that does not verify, a payload
// that is not a valid capnp message, a hello with other versions, a handshake
// that does not finish in time - closes THIS connection, logs one line naming
// the remote endpoint and the reason, and tells the Listener; the process goes
// on. Outgoing frames are queued and written one at a time.
//
// Threading: a Connection lives on one io_context and every method must be
// called on that context's thread. Must not: decide anything about membership
// (the Listener does), block, or throw.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "node/control/control_auth.h"
#include "node/control/control_frame.h"
#include "node/control/control_messages.h"
#include "node/control/credentials.h"

namespace chorus::node {

// Who we say we are in a hello.
struct HandshakeIdentity {
  VersionInfo versions;
  std::string node_name;
  // With cluster.issuer: this node's credential for node_name. Every peer
  // must then show one of the same issuer for the name it gives, and this
  // node shows its own; null: neither.
  std::shared_ptr<const NodeCredentials> credentials;
};

struct ConnectionOptions {
  // Largest frame payload accepted; larger lengths close the connection before
  // anything is allocated.
  uint32_t max_frame_payload = kDefaultMaxFramePayload;
  // The handshake (both hellos and the proof) must finish within this.
  Duration handshake_timeout = std::chrono::seconds(5);
  // Frames queued for sending above this close the connection (a peer that
  // stopped reading).
  size_t max_queued_frames = 4096;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Role { kDialer, kAcceptor };

  class Listener {
   public:
    virtual ~Listener() = default;
    // The handshake finished: peer_name() and peer_versions() are known.
    virtual void OnEstablished(const std::shared_ptr<Connection>& conn) = 0;
    // One authenticated message (only after OnEstablished).
    virtual void OnMessage(const std::shared_ptr<Connection>& conn, ControlMessage message) = 0;
    // Called exactly once, when the connection closes for any reason; `reason`
    // is Ok for a local Close() without error.
    virtual void OnClosed(const std::shared_ptr<Connection>& conn, const Status& reason) = 0;
  };

  static std::shared_ptr<Connection> Create(asio::ip::tcp::socket socket, Role role,
                                            std::shared_ptr<const ClusterKey> key,
                                            HandshakeIdentity identity, ConnectionOptions options,
                                            Listener* listener);
  ~Connection();

  // Starts reading; a dialer sends its hello first.
  void Start();
  // Queues one message; dropped (with a debug line) unless established.
  void Send(const ControlMessage& message);
  // Closes now. `reason` is logged (warning for peer faults, info otherwise) and
  // passed to the listener. Idempotent.
  void Close(const Status& reason);
  // Stops reading, lets queued frames go out (at most ~1 s), then closes.
  void CloseAfterFlush(const Status& reason);

  bool established() const { return state_ == State::kEstablished; }
  bool closed() const { return state_ == State::kClosed; }
  Role role() const { return role_; }
  uint64_t id() const { return id_; }
  // "127.0.0.1:40312" (the remote endpoint of the socket).
  const std::string& remote() const { return remote_; }
  // The name the peer gave in its hello ("" before it arrived).
  const std::string& peer_name() const { return peer_name_; }
  const VersionInfo& peer_versions() const { return peer_versions_; }
  // "node3 (127.0.0.1:40312)" or "127.0.0.1:40312".
  std::string Describe() const;

 private:
  enum class State { kAwaitHello, kAwaitProof, kEstablished, kFlushing, kClosed };

  Connection(asio::ip::tcp::socket socket, Role role, std::shared_ptr<const ClusterKey> key,
             HandshakeIdentity identity, ConnectionOptions options, Listener* listener);

  void ReadHeader();
  void ReadBody(uint32_t length);
  void OnFrame();
  void OnHandshakeFrame(std::span<uint8_t> payload, std::span<const uint8_t> mac);
  void AcceptorOnHello(std::span<uint8_t> payload, std::span<const uint8_t> mac);
  void DialerOnHello(std::span<uint8_t> payload, std::span<const uint8_t> mac);
  void AcceptorOnProof(std::span<uint8_t> payload, std::span<const uint8_t> mac);
  // Records the peer's name and versions from its hello; false when they cannot
  // talk to ours (then a Reject is on its way and the connection closes).
  [[nodiscard]] bool TakePeerHello(const msg::Hello& hello);
  // The session keys from both nonces and the ephemeral keys; the error names
  // what is wrong with the peer's ephemeral key.
  [[nodiscard]] Status StartSession(const msg::Hello& peer_hello);
  // What both sides sign with their credentials: the nonces, the ephemeral
  // keys and the names, dialer's first, after the signer's role.
  std::vector<uint8_t> Transcript(Role signer) const;
  // With credentials: whether the peer's credential (from its hello) and its
  // signature of the transcript verify; Ok without credentials.
  [[nodiscard]] Status CheckPeerCredential(std::span<const uint8_t> transcript_signature) const;
  // The acceptor's early check (before it answers): whether the dialer's
  // credential is this cluster issuer's for its name; false after refusing it.
  [[nodiscard]] bool IssuedCredential();
  // This node's signature of the transcript (empty without credentials).
  std::vector<uint8_t> SignTranscript() const;
  // This node's hello: its nonce and ephemeral key, `proof`, its credential.
  msg::Hello OwnHello(std::vector<uint8_t> proof) const;
  void Established();
  // Sends a Reject under the handshake key and closes once it is out.
  void RejectAndClose(RejectCode code, const std::string& reason, const Status& log_reason);
  void SendRaw(const ControlMessage& message, FrameSealer& sealer);
  void WriteNext();

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  Role role_;
  std::shared_ptr<const ClusterKey> key_;
  HandshakeIdentity identity_;
  ConnectionOptions options_;
  Listener* listener_;
  uint64_t id_;
  std::string remote_;
  State state_ = State::kAwaitHello;
  std::string peer_name_;
  VersionInfo peer_versions_;

  Nonce own_nonce_{};
  Nonce peer_nonce_{};
  EphemeralKey ephemeral_;
  std::vector<uint8_t> peer_ephemeral_;
  Credential peer_credential_;  // from the peer's hello, checked only with identity_.credentials
  FrameSealer handshake_sealer_;
  FrameOpener handshake_opener_;
  std::optional<FrameSealer> session_sealer_;
  std::optional<FrameOpener> session_opener_;

  std::array<uint8_t, kFrameLengthBytes> header_{};
  std::vector<uint8_t> body_;
  std::deque<std::vector<uint8_t>> write_queue_;
  bool writing_ = false;
  Status close_reason_;
  bool notified_closed_ = false;
};

// Resolves "host:port" and connects, giving up at `timeout`. `done` runs on the
// io_context's thread with the connected socket or the error (naming the
// address), and `refused`: true only when the host answered that nothing
// listens at that port (ECONNREFUSED), which a running node never causes.
void AsyncDial(asio::io_context& io, const std::string& address, Duration timeout,
               std::function<void(Result<asio::ip::tcp::socket>, bool refused)> done);

}  // namespace chorus::node
