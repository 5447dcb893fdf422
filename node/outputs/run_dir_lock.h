// RunDirLock: one live process per node folder (runs/<run>/<node>/). Two
// nodes that would write one folder (started by hand under one name)
// interleave their metrics and overwrite each other's summary, log and
// checkpoint; the second one is refused instead, naming the first.
//
// An advisory flock(2) on <dir>/.lock, held for the lock object's life and
// released by the kernel when the process ends however it ends (a killed
// node leaves no stale lock).
#pragma once

#include <string>

#include "common/status.h"

namespace chorus::node {

class RunDirLock {
 public:
  // Takes the lock of `dir` (which must exist). FailedPrecondition naming
  // the folder and the holder's pid when another live process holds it.
  [[nodiscard]] static Result<RunDirLock> Acquire(const std::string& dir);

  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace chorus::node
