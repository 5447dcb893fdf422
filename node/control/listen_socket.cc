// The control plane's listening socket (see listen_socket.h).
#include "node/control/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "node/config/config_parse.h"

namespace chorus::node {

Result<std::pair<int, uint16_t>> ListenOnFreePort(const std::string& host) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Err(InvalidArgument("'" + host + "' is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && fd <= STDERR_FILENO) {
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    fd = moved;
  }
  if (fd < 0) return Err(ErrnoStatus(errno, "socket"));
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return Err(ErrnoStatus(err, "listening on a free port of " + host));
  }
  return std::make_pair(fd, static_cast<uint16_t>(ntohs(addr.sin_port)));
}

uint16_t PortBelowEphemeralRange(const char* range_file) {
  constexpr long kLowest = 1024, kSpan = 16384;
  long low = 32768;  // Linux's default
  if (FILE* f = std::fopen(range_file, "r")) {
    long read_low = 0;
    if (std::fscanf(f, "%ld", &read_low) == 1) low = read_low;
    std::fclose(f);
  }
  const long first = std::max(kLowest, low - kSpan);
  if (low - first < 256) return 0;
  std::random_device seed;
  std::uniform_int_distribution<long> pick(first, low - 1);
  return static_cast<uint16_t>(pick(seed));
}

namespace {
int rejoin_copy = -1;  // a dup of the handed-over socket, kept across exec
}  // namespace

Result<int> InheritedListenFd() {
  const char* text = std::getenv(kListenFdEnv);
  if (text == nullptr || *text == '\0') return -1;
  CHORUS_ASSIGN_OR_RETURN(int64_t fd, ParseEnvInteger(kListenFdEnv, text, 0));
  if (rejoin_copy < 0) rejoin_copy = fcntl(static_cast<int>(fd), F_DUPFD, 3);  // no close-on-exec
  return static_cast<int>(fd);
}

void ListenFdForRejoin() {
  if (rejoin_copy >= 0) {
    setenv(kListenFdEnv, std::to_string(rejoin_copy).c_str(), /*overwrite=*/1);
  } else {
    unsetenv(kListenFdEnv);
  }
}

}  // namespace chorus::node
