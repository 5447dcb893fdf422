// WriteAll, SendAll, ReadAll, ReadAtUpTo, OwnedFd (see posix_io.h).
#include "common/posix_io.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace chorus {
namespace {

template <typename Write>
Status WriteLoop(std::span<const uint8_t> data, std::string_view what, Write&& write_some) {
  while (!data.empty()) {
    const ssize_t n = RetryOnEintr([&] { return write_some(data); });
    if (n < 0) return ErrnoStatus(errno, "write " + std::string(what));
    if (n == 0) return Unavailable("write " + std::string(what) + ": nothing written");
    data = data.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Status WriteAll(int fd, std::span<const uint8_t> data, std::string_view what) {
  return WriteLoop(data, what, [fd](std::span<const uint8_t> rest) {
    return ::write(fd, rest.data(), rest.size());
  });
}

Status SendAll(int fd, std::span<const uint8_t> data, std::string_view what) {
  return WriteLoop(data, what, [fd](std::span<const uint8_t> rest) {
    return ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
  });
}

Status ReadAll(int fd, std::span<uint8_t> data, std::string_view what) {
  while (!data.empty()) {
    const ssize_t n = RetryOnEintr([&] { return ::read(fd, data.data(), data.size()); });
    if (n < 0) return ErrnoStatus(errno, "read " + std::string(what));
    if (n == 0) return Unavailable("read " + std::string(what) + ": closed by the other end");
    data = data.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<size_t> ReadAtUpTo(int fd, uint64_t offset, std::span<uint8_t> data, std::string_view what) {
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = RetryOnEintr(
        [&] { return ::pread(fd, data.data() + got, data.size() - got, static_cast<off_t>(offset + got)); });
    if (n < 0) return Err(ErrnoStatus(errno, "read " + std::string(what)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

void OwnedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace chorus
