// StopSignals (see stop_signals.h).
#include "node/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

namespace chorus::node {
namespace {

int g_stop_pipe_write = -1;

extern "C" void OnStopSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_stop_pipe_write >= 0) {
    [[maybe_unused]] const ssize_t n = write(g_stop_pipe_write, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

Status StopSignals::Install() {
  if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus(errno, "creating the pipe for SIGINT/SIGTERM");
  g_stop_pipe_write = fds_[1];
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, &old_int_) != 0 || sigaction(SIGTERM, &sa, &old_term_) != 0) {
    return ErrnoStatus(errno, "installing the SIGINT/SIGTERM handler");
  }
  installed_ = true;
  return Status::Ok();
}

StopSignals::~StopSignals() {
  if (installed_) {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  if (fds_[1] >= 0 && g_stop_pipe_write == fds_[1]) g_stop_pipe_write = -1;
  if (fds_[0] >= 0) close(fds_[0]);
  if (fds_[1] >= 0) close(fds_[1]);
}

int StopSignals::Wait(double seconds) const {
  if (seconds <= 0) return 0;
  pollfd p{fds_[0], POLLIN, 0};
  const int ms = static_cast<int>(std::min(std::ceil(seconds * 1000), 3600e3));
  if (poll(&p, 1, ms) <= 0) return 0;  // timeout, or EINTR (the byte is read next time)
  unsigned char byte = 0;
  return read(fds_[0], &byte, 1) == 1 ? byte : 0;
}

}  // namespace chorus::node
