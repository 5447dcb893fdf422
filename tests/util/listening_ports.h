// Whether some socket of this host listens on a TCP port, read from
// /proc/net/tcp and tcp6 (local address "HEX_IP:HEX_PORT", state 0A =
// LISTEN): for tests that check which port a node really bound.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace chorus::testing {

inline bool ListensOn(uint16_t port) {
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;
      if (std::stoul(local.substr(colon + 1), nullptr, 16) == port) return true;
    }
  }
  return false;
}

}  // namespace chorus::testing
