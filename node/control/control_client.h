// A one-shot, blocking control-plane client: dial a node, complete the
// handshake, ask for its state, hang up.
//
// Used by a node's start-up self-check (can we reach our own advertised
// address?), by tests (is the node still answering after garbage on its port?)
// and by tools. It runs its own io_context on the calling thread. Must not: join
// the cluster or keep the connection.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "node/control/control_messages.h"
#include "node/control/credentials.h"

namespace chorus::node {

struct ProbeResult {
  std::string peer_name;     // the name in the peer's hello
  VersionInfo peer_versions;
  msg::State state;          // the peer's answer to a StateRequest
};

// Fails with the handshake's or the connection's error: PermissionDenied for a
// token mismatch, FailedPrecondition for a version mismatch (naming both
// versions), Unavailable / DeadlineExceeded when the address does not answer.
[[nodiscard]] Result<ProbeResult> ProbeNode(const std::string& address, const std::string& token,
                                            const VersionInfo& versions, const std::string& probe_name,
                                            Deadline deadline,
                                            std::shared_ptr<const NodeCredentials> credentials = nullptr);

}  // namespace chorus::node
