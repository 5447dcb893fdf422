// ReadFileBytes (see file_bytes.h).
#include "trainer/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace chorus::trainer {

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(ErrnoStatus(errno, "open " + path));
  std::vector<uint8_t> data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0 && static_cast<uint64_t>(st.st_size) <= max_bytes) {
    data.reserve(static_cast<size_t>(st.st_size));
  }
  std::array<uint8_t, 1 << 16> chunk;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Err(ErrnoStatus(err, "read " + path));
    }
    if (n == 0) break;
    data.insert(data.end(), chunk.begin(), chunk.begin() + n);
    if (data.size() > max_bytes) {
      ::close(fd);
      return Err(ResourceExhausted(path + ": file is larger than " + std::to_string(max_bytes) +
                                   " bytes"));
    }
  }
  ::close(fd);
  return data;
}

}  // namespace chorus::trainer
