#include "common/host_info.h"

#include <gtest/gtest.h>

#include <string>

namespace chorus {
namespace {

TEST(HostInfoTest, CpuModelIsTheFirstModelNameTrimmed) {
  const std::string cpuinfo =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor  \n"
      "\nprocessor\t: 1\nmodel name\t: something else\n";
  EXPECT_EQ(CpuModelFromCpuinfo(cpuinfo), "AMD EPYC 7B13 64-Core Processor");
  // "model" alone is not "model name"; no such line: unknown.
  EXPECT_EQ(CpuModelFromCpuinfo("processor\t: 0\nmodel\t\t: 1\n"), "");
  EXPECT_EQ(CpuModelFromCpuinfo(""), "");
}

TEST(HostInfoTest, ThisHostHasCores) { EXPECT_GE(ReadHostInfo().cores, 1); }

// /proc/stat: the "cpu" line's fields summed, idle and iowait (4th and 5th)
// as idle, one cpuN line per CPU; idle cores = CPUs x the idle share of the
// ticks between two readings.
TEST(HostInfoTest, IdleCoresFromTwoProcStatReadings) {
  const CpuTimes before = CpuTimesFromProcStat(
      "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\ncpu1 50 0 50 350 50 0 0 0 0 0\nintr 5\n");
  EXPECT_EQ(before.total, 1000u);
  EXPECT_EQ(before.idle, 800u);
  EXPECT_EQ(before.cpus, 2);
  const CpuTimes after = CpuTimesFromProcStat(
      "cpu  250 0 100 850 100 0 0 0 0 0\ncpu0 x\ncpu1 x\n");  // 300 ticks later, 150 of them idle
  EXPECT_DOUBLE_EQ(IdleCores(before, after), 1.0);
  EXPECT_EQ(IdleCores(after, after), -1);     // no tick passed
  EXPECT_EQ(IdleCores(before, CpuTimes{}), -1);  // unreadable
  EXPECT_EQ(CpuTimesFromProcStat("").cpus, 0);
}

}  // namespace
}  // namespace chorus
