// Byte buffers that start on a page boundary. Std only.
//
// Buffers that a transport's kernel path copies between processes (shm's CMA
// process_vm_readv) should start on a page: into and out of a buffer 16 bytes
// past a page, where malloc puts large blocks, the copy is markedly slower
// (docs/performance.md, "Point-to-point against fi_pingpong").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace chorus {

inline constexpr size_t kPageBytes = 4096;

// `bytes` rounded up to a whole number of pages.
inline constexpr size_t RoundUpToPage(size_t bytes) {
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

struct PageBytesFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using PageBytes = std::unique_ptr<std::byte[], PageBytesFree>;

// At least `bytes` (>= 1 allocated) uninitialised bytes starting on a page;
// throws std::bad_alloc like operator new.
inline PageBytes AllocatePageBytes(size_t bytes) {
  const size_t rounded = RoundUpToPage(std::max<size_t>(bytes, 1));
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kPageBytes, rounded));
  if (p == nullptr) throw std::bad_alloc();
  return PageBytes(p);
}

// The same, zero-filled (for benchmark buffers that must not start with
// whatever the pages held).
inline PageBytes AllocateZeroedPageBytes(size_t bytes) {
  PageBytes p = AllocatePageBytes(bytes);
  std::fill(p.get(), p.get() + bytes, std::byte{0});
  return p;
}

// std::allocator that starts every allocation on a page (for vectors a
// transport sends from or receives into: a model's parameters and gradients).
template <typename T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) noexcept {}  // NOLINT: implicit, as std::allocator
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return reinterpret_cast<T*>(AllocatePageBytes(n * sizeof(T)).release());
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <typename U>
  bool operator==(const PageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace chorus
