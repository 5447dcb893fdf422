// The control plane's listening socket before the control plane owns it: one
// bound to a free port (what `chorus launch` binds for node0), and the one a
// node inherits from `chorus launch` through an environment variable.
//
// Plain POSIX sockets; the control plane adopts the fd (ControlPlane::Start).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace chorus::node {

// The environment variable through which launch hands node0 its control-plane
// socket, bound and listening (as systemd's socket activation hands a daemon
// its own): picking a free port and leaving node0 to bind it later would give
// any other process on the host a moment to take it first.
inline constexpr const char* kListenFdEnv = "CHORUS_LISTEN_FD";

// A TCP socket bound to a free port of `host` (an IPv4 address) and listening:
// close-on-exec, never fd 0-2. Returns the fd (the caller closes it) and its
// port. Launch binds node0's this way; benchmarks and tests use it too.
[[nodiscard]] Result<std::pair<int, uint16_t>> ListenOnFreePort(const std::string& host);

// A port for a node0 that binds in a network namespace of its own, where no
// socket can be handed over: below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, read from `range_file`), so that no
// connection in that namespace holds it as its local port (a free port of
// the host could be one that the previous run's node0 was still closing
// there); random within the 16384 ports below the range, so that runs one
// after another differ. 0 when the range starts too low to leave room.
[[nodiscard]] uint16_t PortBelowEphemeralRange(const char* range_file = "/proc/sys/net/ipv4/ip_local_port_range");

// The control-plane socket `chorus launch` handed over (kListenFdEnv), or -1
// when none was; a malformed variable is an error naming it. The control
// plane takes the fd over (and closes it); a copy stays open for the process
// that rejoins in this one's place (ListenFdForRejoin).
[[nodiscard]] Result<int> InheritedListenFd();

// Before this process execs itself to rejoin: sets kListenFdEnv to the copy of
// the handed-over socket, which stays open across exec, or removes it when no
// socket was handed over. The launcher keeps its own copy open, so the
// address is taken: the new image must serve the same socket.
void ListenFdForRejoin();

}  // namespace chorus::node
