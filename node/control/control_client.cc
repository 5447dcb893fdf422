// ProbeNode: dial, handshake, StateRequest, State, close (see control_client.h).
#include "node/control/control_client.h"

#include <memory>
#include <optional>

#include <asio.hpp>

#include "node/control/control_auth.h"
#include "node/control/control_connection.h"

namespace chorus::node {
namespace {

class ProbeListener : public Connection::Listener {
 public:
  explicit ProbeListener(std::string probe_name) : probe_name_(std::move(probe_name)) {}

  void OnEstablished(const std::shared_ptr<Connection>& conn) override {
    msg::StateRequest request;  // no control address: a tool's request, not a discovery probe
    request.sender = probe_name_;
    conn->Send(request);
  }
  void OnMessage(const std::shared_ptr<Connection>& conn, ControlMessage message) override {
    if (auto* state = std::get_if<msg::State>(&message)) {
      result_ = ProbeResult{conn->peer_name(), conn->peer_versions(), std::move(*state)};
      conn->Close(Status::Ok());
    } else if (auto* reject = std::get_if<msg::Reject>(&message)) {
      error_ = Unavailable("state request refused by " + conn->Describe() + ": " + reject->reason);
      conn->Close(Status::Ok());
    }
  }
  void OnClosed(const std::shared_ptr<Connection>& conn, const Status& reason) override {
    if (!result_ && !error_) {
      error_ = reason.ok() ? Unavailable(conn->Describe() + " closed the connection without an answer")
                           : reason;
    }
    finished_ = true;
  }

  bool finished() const { return finished_; }
  std::optional<ProbeResult> result_;
  std::optional<Status> error_;

 private:
  std::string probe_name_;
  bool finished_ = false;
};

// Deadline::Never() must not overflow Asio's clock arithmetic.
Duration Capped(Duration d) { return std::min<Duration>(d, std::chrono::hours(1)); }

}  // namespace

Result<ProbeResult> ProbeNode(const std::string& address, const std::string& token,
                              const VersionInfo& versions, const std::string& probe_name,
                              Deadline deadline, std::shared_ptr<const NodeCredentials> credentials) {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  asio::io_context io;
  auto key = std::make_shared<const ClusterKey>(ClusterKey::FromToken(token));
  ProbeListener listener(probe_name);
  std::shared_ptr<Connection> conn;
  std::optional<Status> dial_error;
  ConnectionOptions options;
  options.handshake_timeout = std::max<Duration>(Capped(deadline.Remaining()), std::chrono::milliseconds(1));
  AsyncDial(io, address, Capped(deadline.Remaining()), [&](Result<asio::ip::tcp::socket> socket, bool /*refused*/) {
    if (!socket) {
      dial_error = socket.error();
      return;
    }
    conn = Connection::Create(std::move(*socket), Connection::Role::kDialer, key,
                              HandshakeIdentity{versions, probe_name, std::move(credentials)}, options, &listener);
    conn->Start();
  });
  while (!dial_error && !listener.finished()) {
    if (deadline.Expired()) break;
    io.run_one_for(Capped(deadline.Remaining()));
    if (io.stopped()) io.restart();
  }
  if (dial_error) return Err(*dial_error);
  if (listener.result_) return *listener.result_;
  if (listener.error_) return Err(*listener.error_);
  if (conn) conn->Close(Status::Ok());
  return Err(DeadlineExceeded("probing " + address + ": no state answer before the deadline"));
}

}  // namespace chorus::node
