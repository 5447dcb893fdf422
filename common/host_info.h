// HostInfo: what a run records about the machine it ran on, so that a report
// can say whether its nodes shared CPU cores (which caps their throughput).
//
// Must not: fail. A fact that cannot be read is empty / 0, and the reader of
// the record says "not recorded".
#pragma once

#include <string>
#include <string_view>

namespace chorus {

struct HostInfo {
  std::string cpu_model;  // /proc/cpuinfo's first "model name" ("" when unknown)
  int cores = 0;          // logical CPUs this process may run on (0 when unknown)
};

// This host, read now (/proc/cpuinfo, the process's CPU affinity).
HostInfo ReadHostInfo();

// The first "model name" value of /proc/cpuinfo text, trimmed; "" when absent.
std::string CpuModelFromCpuinfo(std::string_view cpuinfo);

}  // namespace chorus
