// PortBelowEphemeralRange: the port a node0 in a network namespace of its own
// binds, read against the kernel's ephemeral range.
#include "node/control/listen_socket.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

namespace chorus::node {
namespace {

// A range file holding `text`, removed at the end of the scope.
struct RangeFile {
  explicit RangeFile(const std::string& text)
      : path(std::filesystem::temp_directory_path() / ("chorus-port-range-" + std::to_string(getpid()))) {
    std::ofstream(path) << text;
  }
  ~RangeFile() { std::filesystem::remove(path); }
  std::filesystem::path path;
};

TEST(ListenSocketTest, APortBelowTheEphemeralRangeVariesAndStaysBelowIt) {
  RangeFile range("40000\t60999\n");
  std::set<uint16_t> seen;
  for (int i = 0; i < 50; ++i) {
    const uint16_t port = PortBelowEphemeralRange(range.path.c_str());
    EXPECT_GE(port, 40000 - 16384);
    EXPECT_LT(port, 40000);
    seen.insert(port);
  }
  EXPECT_GT(seen.size(), 40u);
}

TEST(ListenSocketTest, NoRoomBelowTheRangeGivesZeroAndNoFileLinuxsDefault) {
  RangeFile low("1100 60999\n");
  EXPECT_EQ(PortBelowEphemeralRange(low.path.c_str()), 0);
  const uint16_t port = PortBelowEphemeralRange("/nonexistent/ip_local_port_range");
  EXPECT_GE(port, 32768 - 16384);
  EXPECT_LT(port, 32768);
}

}  // namespace
}  // namespace chorus::node
