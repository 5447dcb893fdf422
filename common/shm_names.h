// Shared-memory names (/dev/shm) that a process killed with SIGKILL leaves
// behind: it cannot unlink them itself, and each holds its size in RAM.
//
// Must not: remove a name whose creator may still run (kill(pid, 0) must say
// ESRCH), or one that another user owns.
#pragma once

#include <sys/types.h>

#include <string_view>

namespace chorus {

// True when no process `pid` runs (kill(pid, 0) says ESRCH); a zombie still runs.
bool ProcessIsGone(pid_t pid);

// Unlinks every /dev/shm name "<prefix><pid><separator>..." that this user
// owns and whose <pid> no longer runs; returns how many it removed.
// Chorus's host segments are "chorus-seg-<pid>-..."; libfabric shm's
// endpoint regions are "<pid>:<uid>:<index>" (and Chorus's per-epoch
// "<pid>:<uid>:<index>.e<epoch>").
int UnlinkShmNamesOfDeadProcesses(std::string_view prefix, char separator);

}  // namespace chorus
