// Byte I/O over the socketpair between a bench parent and its fork()ed processes
// (see bench_process.h).
#include "node/bench/bench_process.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace chorus::node {

Status WriteAll(int fd, const void* data, size_t n, std::string_view who) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a vanished peer process is an error here, not a SIGPIPE.
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoStatus(errno, std::string(who) + ": writing to a process socket");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t n, std::string_view who) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Unavailable(std::string(who) + ": the other process closed its socket");
    if (r < 0) return ErrnoStatus(errno, std::string(who) + ": reading from a process socket");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status WriteBlob(int fd, std::span<const uint8_t> blob, std::string_view who) {
  const auto n = static_cast<uint32_t>(blob.size());
  CHORUS_RETURN_IF_ERROR(WriteAll(fd, &n, sizeof(n), who));
  return WriteAll(fd, blob.data(), blob.size(), who);
}

Result<std::vector<uint8_t>> ReadBlob(int fd, std::string_view who) {
  uint32_t n = 0;
  CHORUS_RETURN_IF_ERROR(ReadAll(fd, &n, sizeof(n), who));
  if (n == 0 || n > kMaxBlobBytes) {
    return Err(DataLoss(std::string(who) + ": address of " + std::to_string(n) + " bytes"));
  }
  std::vector<uint8_t> blob(n);
  CHORUS_RETURN_IF_ERROR(ReadAll(fd, blob.data(), blob.size(), who));
  return blob;
}

Status AwaitGo(int fd, std::string_view who) {
  CHORUS_RETURN_IF_ERROR(WriteAll(fd, "r", 1, who));
  char go = 0;
  return ReadAll(fd, &go, 1, who);
}

Result<double> RunTimedRound(std::span<const int> fds, std::string_view who) {
  char ready = 0;
  for (int fd : fds) CHORUS_RETURN_IF_ERROR(ReadAll(fd, &ready, 1, who));
  for (int fd : fds) CHORUS_RETURN_IF_ERROR(WriteAll(fd, "g", 1, who));
  double slowest = 0;
  for (int fd : fds) {
    double t = 0;
    CHORUS_RETURN_IF_ERROR(ReadAll(fd, &t, sizeof(t), who));
    slowest = std::max(slowest, t);
  }
  return slowest;
}

}  // namespace chorus::node
