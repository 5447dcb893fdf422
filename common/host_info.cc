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

// The lines of `text` (without their '\n'), each passed to `fn` until it returns true.
template <typename Fn>
void ForEachLine(std::string_view text, Fn&& fn) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (fn(text.substr(start, end - start))) return;
    start = end + 1;
  }
}

}  // namespace

std::string CpuModelFromCpuinfo(std::string_view cpuinfo) {
  std::string model;
  ForEachLine(cpuinfo, [&](std::string_view line) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || Trim(line.substr(0, colon)) != "model name") return false;
    model = std::string(Trim(line.substr(colon + 1)));
    return true;
  });
  return model;
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

CpuTimes CpuTimesFromProcStat(std::string_view stat) {
  CpuTimes t;
  ForEachLine(stat, [&](std::string_view line) {
    if (line.rfind("cpu ", 0) == 0) {
      std::istringstream fields{std::string(line.substr(4))};
      uint64_t value = 0;
      for (int i = 0; fields >> value; ++i) {
        t.total += value;
        if (i == 3 || i == 4) t.idle += value;  // idle, iowait
      }
    } else if (line.rfind("cpu", 0) == 0 && line.size() > 3 && std::isdigit(static_cast<unsigned char>(line[3]))) {
      ++t.cpus;
    }
    return false;
  });
  return t;
}

CpuTimes ReadCpuTimes() {
  std::ifstream in("/proc/stat");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return CpuTimesFromProcStat(text.str());
}

double IdleCores(const CpuTimes& before, const CpuTimes& after) {
  if (after.cpus <= 0 || after.total <= before.total || after.idle < before.idle) return -1;
  return static_cast<double>(after.cpus) * static_cast<double>(after.idle - before.idle) /
         static_cast<double>(after.total - before.total);
}

}  // namespace chorus
