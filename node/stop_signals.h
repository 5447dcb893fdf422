// StopSignals: SIGINT and SIGTERM taken by a handler that writes the signal's
// number to a pipe, for a loop to poll (`chorus launch` forwards them to its
// nodes, `chorus cluster` leaves). A handler, not a mask and sigwait: the
// kernel gives a process's signal to any thread that does not block it, and
// library threads started before main() (OpenBLAS's pool) block nothing.
// There libinfinipath's own handler (loaded with libfabric's psm2 provider)
// called exit() under our running threads: `chorus cluster` then crashed in
// the log sink the static destructors had freed (1 in about 20 stops).
//
// One StopSignals at a time per process; the previous handlers come back when
// it is destroyed.
#pragma once

#include <signal.h>

#include "common/status.h"

namespace chorus::node {

class StopSignals {
 public:
  StopSignals() = default;
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();

  [[nodiscard]] Status Install();
  // Readable once a signal came; each byte read is one signal's number.
  int read_fd() const { return fds_[0]; }
  // Waits up to `seconds` for a signal; returns its number, or 0.
  int Wait(double seconds) const;

 private:
  int fds_[2] = {-1, -1};
  bool installed_ = false;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace chorus::node
