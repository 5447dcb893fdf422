// Byte buffers that start on a page boundary. Std only.
//
// Buffers that a transport's kernel path copies between processes (shm's CMA
// process_vm_readv) should start on a page: into and out of a buffer 16 bytes
// past a page, where malloc puts large blocks, the copy ran about a third
// slower (`chorus bench p2p`, shm, 1 MiB).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace chorus {

inline constexpr size_t kPageBytes = 4096;

struct PageBytesFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using PageBytes = std::unique_ptr<std::byte[], PageBytesFree>;

// At least `bytes` (>= 1 allocated) uninitialised bytes starting on a page;
// throws std::bad_alloc like operator new.
inline PageBytes AllocatePageBytes(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kPageBytes - 1) / kPageBytes * kPageBytes;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kPageBytes, rounded));
  if (p == nullptr) throw std::bad_alloc();
  return PageBytes(p);
}

}  // namespace chorus
