// MrCache: a bounded LRU cache of memory registrations keyed by address range.
//
// The fabric transport registers a buffer only when its provider requires
// FI_MR_LOCAL (or when forced for testing). Registering per message is slow, so
// registrations are cached: a lookup hits when a cached region contains
// [address, address + length). At most `capacity` regions are cached; the least
// recently used is dropped first. A registration handed out stays valid while
// the caller holds its `owner`, even after eviction (the provider object is
// closed when the last holder lets go).
//
// Limitation: like every registration cache without memory hooks, it assumes a
// cached range is not unmapped and remapped while cached (Chorus keeps its
// communication buffers for the whole run); Clear() drops everything.
//
// Must not: include libfabric headers (the registration function hides them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace chorus::gossip::fabric {

struct MrRegistration {
  void* desc = nullptr;          // fi_mr_desc(), passed to fi_tsend / fi_trecv
  std::shared_ptr<void> owner;   // closes the registration when the last copy goes
};

struct MrCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;          // each miss is one registration
  uint64_t evictions = 0;
  uint64_t entries = 0;         // currently cached
};

class MrCache {
 public:
  using RegisterFn = std::function<Result<MrRegistration>(const void* address, size_t length)>;

  MrCache(size_t capacity, RegisterFn register_fn);

  // A registration covering [address, address + length): cached or new.
  [[nodiscard]] Result<MrRegistration> Get(const void* address, size_t length);
  MrCacheStats Stats() const;
  void Clear();

 private:
  struct Entry {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    MrRegistration registration;
  };

  const size_t capacity_;
  RegisterFn register_fn_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  MrCacheStats stats_;
};

}  // namespace chorus::gossip::fabric
