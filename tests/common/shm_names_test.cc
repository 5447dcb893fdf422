// UnlinkShmNamesOfDeadProcesses: removes the names of a process that no longer
// runs, and nothing of a live one or of another form.
#include "common/shm_names.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {
namespace {

bool Exists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

void Create(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  close(fd);
}

TEST(ShmNamesTest, RemovesOnlyTheNamesOfDeadProcesses) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: kill(child, 0) says ESRCH
  const std::string prefix = "chorus-shm-names-test-" + std::to_string(getpid()) + "-";
  const std::string dead = "/" + prefix + std::to_string(child) + ":0:0.e1";
  const std::string alive = "/" + prefix + std::to_string(getpid()) + ":0:0";
  const std::string other_form = "/" + prefix + std::to_string(child) + "-0";
  for (const std::string& n : {dead, alive, other_form}) Create(n);
  EXPECT_EQ(UnlinkShmNamesOfDeadProcesses(prefix, ':'), 1);
  EXPECT_FALSE(Exists(dead));
  EXPECT_TRUE(Exists(alive));
  EXPECT_TRUE(Exists(other_form));
  for (const std::string& n : {alive, other_form}) shm_unlink(n.c_str());
}

std::vector<uint8_t> Blob(std::string_view s, bool nul) {
  std::vector<uint8_t> b(s.begin(), s.end());
  if (nul) b.push_back(0);
  return b;
}

TEST(ShmNamesTest, AddressPidIsReadFromShmAddressesOnly) {
  EXPECT_EQ(ShmAddressPid(Blob("fi_shm://4321:0:0", true)), 4321);
  EXPECT_EQ(ShmAddressPid(Blob("4321:1000:2.e3", true)), 4321);
  EXPECT_EQ(ShmAddressPid(Blob("4321:0:0", false)), 4321);
  EXPECT_EQ(ShmAddressPid(Blob("fi_shm://node0", true)), std::nullopt);
  EXPECT_EQ(ShmAddressPid(Blob("127.0.0.1:4000", true)), std::nullopt);
  EXPECT_EQ(ShmAddressPid(Blob("4321", false)), std::nullopt);
  EXPECT_EQ(ShmAddressPid(Blob("0:0:0", false)), std::nullopt);
  EXPECT_EQ(ShmAddressPid(std::vector<uint8_t>{2, 0, 0x1f, 0x90, 127, 0, 0, 1}), std::nullopt);
}

TEST(ShmNamesTest, RegionNameIsTheAddressWithoutSchemeOrNul) {
  EXPECT_EQ(ShmRegionName(Blob("fi_shm://4321:0:0", true)), "4321:0:0");
  EXPECT_EQ(ShmRegionName(Blob("4321:1000:2.e3", true)), "4321:1000:2.e3");
  EXPECT_EQ(ShmRegionName(Blob("4321:0:0", false)), "4321:0:0");
}

}  // namespace
}  // namespace chorus
