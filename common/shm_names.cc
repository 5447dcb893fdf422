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
#include <string>

namespace chorus {

bool ProcessIsGone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

int UnlinkShmNamesOfDeadProcesses(std::string_view prefix, char separator) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    const std::string_view name(e->d_name);
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = name.substr(prefix.size());
    long pid = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc() || pid <= 0 || end == rest.data() + rest.size() || *end != separator) continue;
    if (!ProcessIsGone(static_cast<pid_t>(pid))) continue;
    const std::string path = "/" + std::string(name);
    struct stat st{};
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid()) continue;
    if (shm_unlink(path.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace chorus
