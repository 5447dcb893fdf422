// HostInfo (see host_info.h).
#include "common/host_info.h"

#include <sched.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

namespace chorus {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The CPUs this process may use (a container or taskset may allow fewer than
// the machine has); the machine's count where the affinity cannot be read.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

std::string CpuModelFromCpuinfo(std::string_view cpuinfo) {
  size_t start = 0;
  while (start < cpuinfo.size()) {
    size_t end = cpuinfo.find('\n', start);
    if (end == std::string_view::npos) end = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(start, end - start);
    start = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || Trim(line.substr(0, colon)) != "model name") continue;
    return std::string(Trim(line.substr(colon + 1)));
  }
  return "";
}

HostInfo ReadHostInfo() {
  HostInfo host;
  std::ifstream in("/proc/cpuinfo");
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    host.cpu_model = CpuModelFromCpuinfo(text.str());
  }
  host.cores = UsableCores();
  return host;
}

}  // namespace chorus
