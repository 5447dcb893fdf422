// The one place that retries POSIX calls interrupted by a signal (EINTR) and
// loops over short reads and writes. Every fd loop of the project goes through
// these; errno becomes a Status through ErrnoStatus (common/status.h).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace chorus {

// Calls `call` again while it returns a negative value with errno EINTR, and
// returns its last result (errno still set when that is negative).
template <typename Call>
auto RetryOnEintr(Call&& call) -> decltype(call()) {
  for (;;) {
    const auto result = call();
    if (result >= 0 || errno != EINTR) return result;
  }
}

// Writes every byte of `data` to `fd` with write(2). `what` names the file in
// errors ("write <what>: <strerror>").
[[nodiscard]] Status WriteAll(int fd, std::span<const uint8_t> data, std::string_view what);
// The same over a socket with send(2) and MSG_NOSIGNAL: a closed peer is an
// error Status, never a SIGPIPE.
[[nodiscard]] Status SendAll(int fd, std::span<const uint8_t> data, std::string_view what);
// Reads exactly data.size() bytes; Unavailable naming `what` when the other end
// closed (or the file ended) first.
[[nodiscard]] Status ReadAll(int fd, std::span<uint8_t> data, std::string_view what);

// Up to data.size() bytes at `offset` with pread(2): fewer only where the
// file ends. `what` names the file in errors.
[[nodiscard]] Result<size_t> ReadAtUpTo(int fd, uint64_t offset, std::span<uint8_t> data, std::string_view what);

// A descriptor closed when it goes out of scope (or on Reset); movable.
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  ~OwnedFd() { Reset(); }
  OwnedFd(OwnedFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  void Reset();

 private:
  int fd_;
};

// The bytes of `text`, for the calls above and WriteFileAtomic (common/files.h).
inline std::span<const uint8_t> AsBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace chorus
