// MrCache: bounded LRU of memory registrations (see mr_cache.h).
#include "gossip/transport/fabric/mr_cache.h"

namespace chorus::gossip::fabric {

MrCache::MrCache(size_t capacity, RegisterFn register_fn)
    : capacity_(capacity == 0 ? 1 : capacity), register_fn_(std::move(register_fn)) {}

Result<MrRegistration> MrCache::Get(const void* address, size_t length) {
  const auto begin = reinterpret_cast<uintptr_t>(address);
  const uintptr_t end = begin + length;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->begin <= begin && end <= it->end) {
      lru_.splice(lru_.begin(), lru_, it);
      ++stats_.hits;
      return lru_.front().registration;
    }
  }
  ++stats_.misses;
  CHORUS_ASSIGN_OR_RETURN(MrRegistration fresh, register_fn_(address, length));
  lru_.push_front(Entry{begin, end, fresh});
  while (lru_.size() > capacity_) {
    lru_.pop_back();
    ++stats_.evictions;
  }
  stats_.entries = lru_.size();
  return fresh;
}

MrCacheStats MrCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MrCacheStats s = stats_;
  s.entries = lru_.size();
  return s;
}

void MrCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  stats_.entries = 0;
}

}  // namespace chorus::gossip::fabric
