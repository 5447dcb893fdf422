// ControlPlaneImpl: dialing members, and judging their deaths by refused
// dials between heartbeat ticks (see control_plane_impl.h).
#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

// A refused dial is answered at once: the confirming second one follows this
// soon after the first rather than a tick later.
constexpr auto kRedialAfterRefusal = std::chrono::milliseconds(100);

}  // namespace

void ControlPlaneImpl::DialMember(const Member& member) {
  if (dialing_.count(member.name)) return;
  dialing_.insert(member.name);
  const Duration timeout = std::min<Duration>(kMaxControlDialTime, dead_after_);
  AsyncDial(io_, member.control_address, timeout,
            [this, name = member.name](Result<asio::ip::tcp::socket> s, bool refused) {
    Locked([&] {
      dialing_.erase(name);
      const bool deliver = LeaveOwedTo(name);
      if (Terminal() || !formed_ || !view_.Find(name) || (Gone(name) && !deliver) || peers_.count(name)) {
        return;
      }
      if (!s) {
        CHORUS_LOG_DEBUG(Subsys::kControl, "dialing member ", name, ": ", s.error().ToString());
        if (refused) {
          // No connection to it at all (one that closed, or one never made:
          // it died before this node first reached it) and nothing listens
          // at its address: the refusal counts either way.
          liveness_.ConnectionLost(name);
          liveness_.DialRefused(name);
          JudgeRefusals();
          if (liveness_.IsLost(name)) RedialSoon(name);
        } else if (liveness_.IsLost(name)) {
          // Reset (a process dying as it was dialed: its listener still
          // queued the connect) or no answer: this dial says nothing, the
          // next one may be refused.
          RedialSoon(name);
        }
        if (deliver && outbox_.erase(name)) cv_.notify_all();  // it is gone: nothing waits for us
        return;
      }
      // Registered before the handshake can complete (both on this thread).
      dialed_member_[StartDialed(std::move(*s))->id()] = name;
    });
  });
}

void ControlPlaneImpl::RedialSoon(const std::string& name) {
  auto timer = std::make_shared<asio::steady_timer>(io_, kRedialAfterRefusal);
  timer->async_wait([this, timer, name](const asio::error_code& ec) {
    if (ec) return;
    Locked([&] {
      const Member* m = view_.Find(name);
      if (m && formed_ && !Terminal() && !Gone(name) && !peers_.count(name) && liveness_.IsLost(name)) {
        DialMember(*m);
      }
    });
  });
}

void ControlPlaneImpl::JudgeRefusals() {
  if (phase_ != Phase::kMember && phase_ != Phase::kLeaving) return;
  // This thread itself stalled: the next tick forgives the others' silence
  // before it judges it, so leave it all to that tick.
  const Clock::time_point now = Clock::now();
  if (StalledSinceLastTick(now)) return;
  CheckLiveness(now);
  MaybePropose();
}

std::shared_ptr<Connection> ControlPlaneImpl::StartDialed(asio::ip::tcp::socket socket) {
  auto conn = Connection::Create(std::move(socket), Connection::Role::kDialer, key_,
                                 HandshakeIdentity{versions_, self_.name, credentials_}, conn_options_, this);
  conns_.insert(conn);
  conn->Start();
  return conn;
}

}  // namespace chorus::node
