// ProcessWatch: whether another process on this host has exited, from a
// pidfd (Linux 5.3+). A pidfd is readable once its process has exited, as a
// zombie or reaped, and never refers to a later process that reuses the pid;
// kill(pid, 0) says "runs" for a zombie, so a survivor whose dead peer is not
// yet reaped by its parent would not know.
//
// Must not: block (Exited is one poll(2) with no timeout, about 0.4 us).
#pragma once

#include <sys/types.h>

#include "common/status.h"

namespace chorus {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ~ProcessWatch();

  // A watch of `pid`. A process that no longer runs gives a watch that says it
  // exited; Unimplemented where the kernel has no pidfd_open.
  [[nodiscard]] static Result<ProcessWatch> Open(pid_t pid);

  // True once the process has exited (false for a default-constructed watch).
  bool Exited() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  int fd_ = -1;
  bool gone_at_open_ = false;
};

}  // namespace chorus
