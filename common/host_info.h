// HostInfo: what a run records about the machine it ran on, so that a report
// can say whether its nodes shared CPU cores (which caps their throughput).
//
// Must not: fail. A fact that cannot be read is empty / 0, and the reader of
// the record says "not recorded".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

struct HostInfo {
  std::string cpu_model;  // /proc/cpuinfo's first "model name" ("" when unknown)
  int cores = 0;          // logical CPUs this process may run on (0 when unknown)
};

// This host, read now (/proc/cpuinfo, the process's CPU affinity).
HostInfo ReadHostInfo();

// The host's CPU time so far, from /proc/stat's "cpu" line, in clock ticks
// (all zero when it cannot be read).
struct CpuTimes {
  uint64_t idle = 0;   // idle + iowait
  uint64_t total = 0;  // every field
  int cpus = 0;        // its "cpuN" lines
};
CpuTimes ReadCpuTimes();
// CPU times from /proc/stat text (ReadCpuTimes's parser).
CpuTimes CpuTimesFromProcStat(std::string_view stat);
// The cores the host left idle on average between two readings; -1 when the
// readings cannot tell (unreadable, or no tick passed).
double IdleCores(const CpuTimes& before, const CpuTimes& after);

// The first "model name" value of /proc/cpuinfo text, trimmed; "" when absent.
std::string CpuModelFromCpuinfo(std::string_view cpuinfo);

}  // namespace chorus
