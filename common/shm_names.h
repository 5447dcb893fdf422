// Shared-memory names (/dev/shm) that a process killed with SIGKILL leaves
// behind: it cannot unlink them itself, and each holds its size in RAM.
//
// Must not: remove a name whose creator may still run (kill(pid, 0) must say
// ESRCH), or one that another user owns.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
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

// The pid in a libfabric shm endpoint address, "[fi_shm://]<pid>:<uid>:<index>"
// with any suffix and trailing NUL (the fi_getname blob); nullopt for another form.
std::optional<pid_t> ShmAddressPid(std::span<const uint8_t> address);

// The /dev/shm name of a libfabric shm endpoint's region: its address without
// "fi_shm://" and the trailing NUL ("fi_shm://4321:0:0" -> "4321:0:0").
std::string ShmRegionName(std::span<const uint8_t> address);

}  // namespace chorus
