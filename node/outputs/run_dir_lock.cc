// RunDirLock (see run_dir_lock.h).
#include "node/outputs/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace chorus::node {

Result<RunDirLock> RunDirLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Err(ErrnoStatus(errno, "cannot open " + path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Err(ErrnoStatus(err, "cannot lock " + path));
    const std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown");
    return Err(FailedPrecondition(dir + " is in use by another live node (pid " + pid +
                                  "): give each node its own run.node_name (or its own run.name)"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return Err(ErrnoStatus(err, "cannot write " + path));
  }
  return RunDirLock(fd);
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace chorus::node
