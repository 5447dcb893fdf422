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

}  // namespace
}  // namespace chorus
