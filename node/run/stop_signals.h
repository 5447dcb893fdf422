// StopSignals: SIGINT and SIGTERM taken by a handler that writes the signal's
// number to a pipe, for a loop to poll (`chorus launch` forwards them to its
// nodes; StopRequest's watcher serves `chorus node` and `chorus cluster`). A
// handler, not a mask and sigwait: the kernel gives a process's signal to any
// thread that does not block it, and library threads started before main()
// (OpenBLAS's pool) block nothing; StopRequest still blocks them in every
// thread it can (StopRequest::Start). Our handler also replaces any a library
// installed (libfabric's psm2 provider loads one that calls exit() under the
// running threads: docs/libfabric.md, "Settings Chorus applies to libfabric").
//
// One StopSignals at a time per process; the previous handlers come back when
// it is destroyed.
#pragma once

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace chorus::node {

// "SIGTERM" (or "signal 64" for one without a name).
std::string SignalName(int sig);

class StopSignals {
 public:
  StopSignals() = default;
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();

  [[nodiscard]] Status Install();
  // Readable once a signal came; each byte read is one signal's number.
  int read_fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
  bool installed_ = false;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// What the log says of a signal: "received SIGINT <before>: exiting now"
// before StopRequest::EnterStoppablePhase, "received SIGINT: <stopping>;
// another signal exits at once" for the first one after, "received SIGINT
// again: <again>" then. The defaults are `chorus node`'s.
struct StopWording {
  std::string before = "before training began";
  std::string stopping = "stopping after this step (checkpoint; leave the cluster if in one)";
  std::string again = "exiting now, without a checkpoint";
};

// What a training node (`chorus node`) does with SIGINT/SIGTERM. Once
// training runs, the first asks the training loop to stop after its current
// step (requested()): it checkpoints, leaves the cluster telling the others
// it stops (their epoch ends and they re-form without it) and exits with 128
// + the signal's number. Before training runs (joining can wait for other
// nodes for minutes) there is nothing to save, and a second signal is an
// impatient user: then the process exits at once with that status, after
// `before_exit` (flush the logs). A watcher thread reads StopSignals.
// `chorus cluster` uses it the same way with its own words: a signal while
// joining exits at once, then the first one asks its loop to leave.
// Not copyable (its StopSignals, atomics and thread are not).
class StopRequest {
 public:
  ~StopRequest();

  // Call on the main thread before it starts any other: SIGINT and SIGTERM
  // are blocked in it, and so in every thread it starts from then on
  // (training's kernels, control, fabric), and unblocked in the watcher. A
  // signal run on the training thread inside oneDNN's sgemm corrupted the
  // heap (glibc aborted in its free, about 1 stop in 100 on a loaded host);
  // OpenBLAS's idle pool, started before main(), may still take one.
  [[nodiscard]] Status Start(std::function<void()> before_exit, StopWording wording = {});
  // What Start was given, for another path that exits at once (JoinCluster's wedge).
  const std::function<void()>& before_exit() const { return before_exit_; }
  // From now on the first signal asks the loop to stop (training began; for
  // `chorus cluster`, the node became a member).
  void EnterStoppablePhase() { stoppable_.store(true); }
  // The number of the signal that asked to stop, else 0.
  int requested() const { return requested_.load(std::memory_order_relaxed); }
  // Waits up to `seconds` for a stop to be asked; returns requested().
  int WaitRequested(double seconds) const;

 private:
  void Watch();

  StopSignals signals_;
  std::function<void()> before_exit_;
  StopWording wording_;
  std::atomic<bool> stoppable_{false};
  std::atomic<int> requested_{0};
  mutable std::mutex requested_mu_;  // with requested_cv_: WaitRequested
  mutable std::condition_variable requested_cv_;
  int wake_fd_ = -1;  // eventfd: the destructor ends the watcher
  sigset_t stop_set_{};   // SIGINT, SIGTERM
  bool blocked_ = false;  // the starting thread blocks stop_set_ until the destructor
  std::thread watcher_;
};

}  // namespace chorus::node
