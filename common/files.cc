// ReadFileBytes, ReadFileText, WriteFileAtomic (see files.h).
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/posix_io.h"

namespace chorus {
namespace {

template <typename Container>
Result<Container> ReadFile(const std::string& path, uint64_t max_bytes) {
  const OwnedFd owned(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = owned.get();
  if (fd < 0) return Err(ErrnoStatus(errno, "open " + path));
  // Read straight into the container, sized by fstat and grown if the file
  // grows while we read: no copy through a chunk.
  struct stat st {};
  size_t want = size_t{1} << 16;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    want = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes) + 1);
  }
  Container data;
  size_t used = 0;
  for (;;) {
    if (used == data.size()) data.resize(std::max(want, data.size() * 2));
    const ssize_t n = RetryOnEintr([&] { return ::read(fd, data.data() + used, data.size() - used); });
    if (n < 0) return Err(ErrnoStatus(errno, "read " + path));
    if (n == 0) break;
    used += static_cast<size_t>(n);
    if (used > max_bytes) {
      return Err(ResourceExhausted(path + ": file is larger than " + std::to_string(max_bytes) + " bytes"));
    }
  }
  data.resize(used);
  return data;
}

}  // namespace

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, uint64_t max_bytes) {
  return ReadFile<std::vector<uint8_t>>(path, max_bytes);
}

Result<std::string> ReadFileText(const std::string& path, uint64_t max_bytes) {
  return ReadFile<std::string>(path, max_bytes);
}

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes, int mode) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return ErrnoStatus(errno, "create " + tmp);
  auto fail = [&](const Status& why) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return why;
  };
  if (Status written = WriteAll(fd, bytes, tmp); !written.ok()) return fail(written);
  if (::fsync(fd) != 0) return fail(ErrnoStatus(errno, "fsync " + tmp));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, "close " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, "rename " + tmp + " to " + path);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoStatus(errno, "open directory " + dir + " of " + path);
  const OwnedFd dir_closer(dir_fd);
  if (::fsync(dir_fd) != 0) return ErrnoStatus(errno, "fsync directory " + dir + " of " + path);
  return Status::Ok();
}

}  // namespace chorus
