// The spin lock inside a libfabric 1.17 shm endpoint's region, and releasing
// it when a killed process held it.
//
// Every shm endpoint owns a region, the /dev/shm file its peers write commands
// into, and 1.17 guards it with a pthread spin lock kept in the region itself:
// a sender takes the receiver's lock, and the receiver takes its own to read its
// queue. A process killed with SIGKILL inside either critical section leaves
// the lock held for ever, and every process that then takes it spins in the
// provider for good (FabricCore's "Dead peers' locks"). Whoever maps the region
// can give the lock back: pthread_spin_unlock on the shared word is what the
// killed holder would have done next. The critical sections are a few stores
// into the queue, so what the dead process left half-done there is at most one
// command lost or one slot miscounted; the alternative is losing every process
// that touches the region.
//
// The region header is 1.17's private struct smr_region (prov/shm/src/smr_util.h):
// a version byte, the creator's pid at byte 4 and the lock at byte 24. Nothing
// is touched unless the mapped region carries that version and the pid of the
// process that should have created it.
//
// Must not: release a lock that a running process may hold (only one held at
// every try for the whole `proof`); write anything into a region but the lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace chorus::gossip::fabric {

// 1.17's smr_region header (SMR_VERSION 4), the fields read here.
inline constexpr uint8_t kShmRegionVersion = 4;
inline constexpr size_t kShmRegionPidOffset = 4;   // int
inline constexpr size_t kShmRegionLockOffset = 24;  // pthread_spinlock_t

// Where this process maps /dev/shm/<name> from its start (a region it created
// or one of a peer, also once the name was unlinked), read from /proc/self/maps;
// nullptr when it is not mapped.
void* FindShmRegionMapping(std::string_view name);

enum class ShmLockRelease {
  kNotMapped,      // this process does not map the region
  kUnknownLayout,  // not 1.17's version, or not `creator`'s pid: left alone
  kFree,           // a try took it (and gave it back): nobody is stuck on it
  kReleased,       // held at every try for all of `proof`: given back
};

// Tries the spin lock of the region /dev/shm/<name>, created by process
// `creator`, every millisecond for `proof`; when no try takes it, releases it.
ShmLockRelease ReleaseIfHeldThroughout(std::string_view name, pid_t creator, std::chrono::milliseconds proof);

const char* ToString(ShmLockRelease release);

}  // namespace chorus::gossip::fabric
