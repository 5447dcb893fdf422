// Byte I/O over the socketpair between a bench parent and its fork()ed processes
// (see bench_process.h).
#include "node/bench/bench_process.h"

#include <algorithm>
#include <cerrno>
#include <string>

#include "common/posix_io.h"

namespace chorus::node {

Status SendBytes(int fd, const void* data, size_t n, std::string_view who) {
  return SendAll(fd, {static_cast<const uint8_t*>(data), n}, std::string(who) + ": a process socket");
}

Status ReadBytes(int fd, void* data, size_t n, std::string_view who) {
  return ReadAll(fd, {static_cast<uint8_t*>(data), n}, std::string(who) + ": a process socket");
}

Status WriteBlob(int fd, std::span<const uint8_t> blob, std::string_view who) {
  const auto n = static_cast<uint32_t>(blob.size());
  CHORUS_RETURN_IF_ERROR(SendBytes(fd, &n, sizeof(n), who));
  return SendBytes(fd, blob.data(), blob.size(), who);
}

Result<std::vector<uint8_t>> ReadBlob(int fd, std::string_view who) {
  uint32_t n = 0;
  CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &n, sizeof(n), who));
  if (n == 0 || n > kMaxBlobBytes) {
    return Err(DataLoss(std::string(who) + ": address of " + std::to_string(n) + " bytes"));
  }
  std::vector<uint8_t> blob(n);
  CHORUS_RETURN_IF_ERROR(ReadBytes(fd, blob.data(), blob.size(), who));
  return blob;
}

Status AwaitGo(int fd, std::string_view who) {
  CHORUS_RETURN_IF_ERROR(SendBytes(fd, "r", 1, who));
  char go = 0;
  return ReadBytes(fd, &go, 1, who);
}

Result<double> RunTimedRound(std::span<const int> fds, std::string_view who) {
  char ready = 0;
  for (int fd : fds) CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &ready, 1, who));
  for (int fd : fds) CHORUS_RETURN_IF_ERROR(SendBytes(fd, "g", 1, who));
  double slowest = 0;
  for (int fd : fds) {
    double t = 0;
    CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &t, sizeof(t), who));
    slowest = std::max(slowest, t);
  }
  return slowest;
}

}  // namespace chorus::node
