// "host:port" addresses as written in configs (cluster.listen, advertise,
// bootstrap): syntax only. Resolving names and opening sockets is the control
// plane's job; nothing here touches the network.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace chorus::node {

// "host:port", "1.2.3.4:port" or "[v6addr]:port".
struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
};

// Host names follow RFC 1123 (dot-separated labels of letters, digits and '-');
// IPv6 addresses must be in brackets. Errors say what is wrong ("missing
// ':port'", "port 70000 is out of range").
[[nodiscard]] Result<HostPort> ParseHostPort(std::string_view text);

}  // namespace chorus::node
