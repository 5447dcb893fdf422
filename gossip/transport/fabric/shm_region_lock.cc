// Releasing an shm region's spin lock that a killed process held (see shm_region_lock.h).
#include "gossip/transport/fabric/shm_region_lock.h"

#include <pthread.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace chorus::gossip::fabric {

void* FindShmRegionMapping(std::string_view name) {
  std::ifstream maps("/proc/self/maps");
  const std::string path = "/dev/shm/" + std::string(name);
  const std::string deleted = path + " (deleted)";
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode   path"
    unsigned long start = 0, end = 0, offset = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %n", &start, &end, perms, &offset, &path_at) < 4 ||
        path_at <= 0) {
      continue;
    }
    const std::string_view mapped = std::string_view(line).substr(static_cast<size_t>(path_at));
    if (mapped != path && mapped != deleted) continue;
    if (offset != 0 || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's') continue;
    if (end - start < kShmRegionLockOffset + sizeof(pthread_spinlock_t)) continue;
    return reinterpret_cast<void*>(start);
  }
  return nullptr;
}

ShmLockRelease ReleaseIfHeldThroughout(std::string_view name, pid_t creator, std::chrono::milliseconds proof) {
  auto* region = static_cast<uint8_t*>(FindShmRegionMapping(name));
  if (region == nullptr) return ShmLockRelease::kNotMapped;
  int pid = 0;
  std::memcpy(&pid, region + kShmRegionPidOffset, sizeof(pid));
  if (region[0] != kShmRegionVersion || pid != creator) return ShmLockRelease::kUnknownLayout;
  auto* lock = reinterpret_cast<pthread_spinlock_t*>(region + kShmRegionLockOffset);
  const auto until = std::chrono::steady_clock::now() + proof;
  for (;;) {
    if (pthread_spin_trylock(lock) == 0) {
      pthread_spin_unlock(lock);
      return ShmLockRelease::kFree;
    }
    // The last try comes right before the release: another process that
    // released it meanwhile (the region's owner) and a waiter that took it
    // since would have to fit between the two.
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pthread_spin_unlock(lock);
  return ShmLockRelease::kReleased;
}

const char* ToString(ShmLockRelease release) {
  switch (release) {
    case ShmLockRelease::kNotMapped: return "not mapped here";
    case ShmLockRelease::kUnknownLayout: return "not libfabric 1.17's region layout";
    case ShmLockRelease::kFree: return "free";
    case ShmLockRelease::kReleased: return "released";
  }
  return "?";
}

}  // namespace chorus::gossip::fabric
