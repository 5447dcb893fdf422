// StopSignals (see stop_signals.h).
#include "node/run/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "common/posix_io.h"

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

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

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

int StopRequest::WaitRequested(double seconds) const {
  std::unique_lock<std::mutex> lock(requested_mu_);
  requested_cv_.wait_for(lock, std::chrono::duration<double>(std::max(seconds, 0.0)),
                         [this] { return requested_.load() != 0; });
  return requested_.load();
}

Status StopRequest::Start(std::function<void()> before_exit, StopWording wording) {
  before_exit_ = std::move(before_exit);
  wording_ = std::move(wording);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return ErrnoStatus(errno, "creating the stop watcher's eventfd");
  CHORUS_RETURN_IF_ERROR(signals_.Install());
  sigemptyset(&stop_set_);
  sigaddset(&stop_set_, SIGINT);
  sigaddset(&stop_set_, SIGTERM);
  if (const int err = pthread_sigmask(SIG_BLOCK, &stop_set_, nullptr); err != 0) {
    return ErrnoStatus(err, "blocking SIGINT/SIGTERM outside the stop watcher");
  }
  blocked_ = true;
  watcher_ = std::thread([this] {
    pthread_sigmask(SIG_UNBLOCK, &stop_set_, nullptr);  // signals that came meanwhile arrive now
    Watch();
  });
  return Status::Ok();
}

StopRequest::~StopRequest() {
  if (watcher_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
    watcher_.join();
  }
  // A signal that came after the watcher ended reaches the handler (still
  // installed until signals_ goes): it is not lost at exit.
  if (blocked_) pthread_sigmask(SIG_UNBLOCK, &stop_set_, nullptr);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void StopRequest::Watch() {
  while (true) {
    pollfd fds[2] = {{signals_.read_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (RetryOnEintr([&] { return poll(fds, 2, -1); }) < 0) return;
    if (fds[1].revents != 0) return;
    unsigned char sig = 0;
    if (read(signals_.read_fd(), &sig, 1) != 1) continue;
    if (stoppable_.load() && requested_.load() == 0) {
      {
        std::lock_guard<std::mutex> lock(requested_mu_);
        requested_.store(sig);
      }
      requested_cv_.notify_all();
      CHORUS_LOG_WARN(Subsys::kNode, "received ", SignalName(sig), ": ", wording_.stopping,
                      "; another signal exits at once");
      continue;
    }
    CHORUS_LOG_WARN(Subsys::kNode, "received ", SignalName(sig),
                    stoppable_.load() ? " again: " + wording_.again
                                     : " " + wording_.before + ": exiting now");
    if (before_exit_) before_exit_();
    _exit(128 + sig);
  }
}

}  // namespace chorus::node
