// ProcessWatch (see process_watch.h).
#include "common/process_watch.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace chorus {

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(other.pid_), fd_(std::exchange(other.fd_, -1)), gone_at_open_(other.gone_at_open_) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    pid_ = other.pid_;
    fd_ = std::exchange(other.fd_, -1);
    gone_at_open_ = other.gone_at_open_;
  }
  return *this;
}

ProcessWatch::~ProcessWatch() {
  if (fd_ >= 0) close(fd_);
}

Result<ProcessWatch> ProcessWatch::Open(pid_t pid) {
  if (pid <= 0) return Err(InvalidArgument("process watch: pid " + std::to_string(pid)));
  ProcessWatch watch;
  watch.pid_ = pid;
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    watch.fd_ = static_cast<int>(fd);
  } else if (errno == ESRCH) {
    watch.gone_at_open_ = true;
  } else {
    const int error = errno;
    return Err(Status(error == ENOSYS ? StatusCode::kUnimplemented : StatusCode::kInternal,
                      "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(error)));
  }
  return watch;
}

bool ProcessWatch::Exited() const {
  if (gone_at_open_) return true;
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

}  // namespace chorus
