// Removing the /dev/shm names of dead processes (see shm_names.h).
#include "common/shm_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <string>

namespace chorus {

bool ProcessIsGone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

namespace {
// The pid at the start of `s` when a `separator` follows it.
std::optional<pid_t> LeadingPid(std::string_view s, char separator) {
  long pid = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  if (ec != std::errc() || pid <= 0 || end == s.data() + s.size() || *end != separator) return std::nullopt;
  return static_cast<pid_t>(pid);
}

// An shm endpoint address without "fi_shm://" and from its first NUL on.
std::string_view RegionNameView(std::span<const uint8_t> address) {
  constexpr std::string_view kScheme = "fi_shm://";
  std::string_view s(reinterpret_cast<const char*>(address.data()), address.size());
  s = s.substr(0, s.find('\0'));
  if (s.starts_with(kScheme)) s.remove_prefix(kScheme.size());
  return s;
}
}  // namespace

std::optional<pid_t> ShmAddressPid(std::span<const uint8_t> address) {
  return LeadingPid(RegionNameView(address), ':');
}

std::string ShmRegionName(std::span<const uint8_t> address) { return std::string(RegionNameView(address)); }

int UnlinkShmNamesOfDeadProcesses(std::string_view prefix, char separator) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    const std::string_view name(e->d_name);
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = name.substr(prefix.size());
    const std::optional<pid_t> pid = LeadingPid(rest, separator);
    if (!pid || !ProcessIsGone(*pid)) continue;
    const std::string path = "/" + std::string(name);
    struct stat st{};
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid()) continue;
    if (shm_unlink(path.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace chorus
