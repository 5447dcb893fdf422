// fabric.port as `chorus node` processes: two nodes on 127.0.0.1, each with
// its own set data-plane port, listen on those ports (read from
// /proc/net/tcp while they run) and train one model; a node whose set port
// another socket holds exits at once with an error naming fabric.port and the
// port.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"
#include "tests/util/listening_ports.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::kDataDir;
using testing::ReadJson;
using chorus::testing::ListensOn;

class DataPortProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    out_ = fs::temp_directory_path() / ("chorus-data-port-test-" + std::to_string(getpid()));
    fs::remove_all(out_);
  }
  void TearDown() override { fs::remove_all(out_); }

  // `chorus node` of run "ports" over tcp;ofi_rxm: 1 epoch of 20 steps (batch
  // 64, 2560 images over 2 nodes), one thread, then `sets` (KEY=VALUE).
  std::vector<std::string> NodeArgs(const std::vector<std::string>& sets) const {
    std::vector<std::string> args = {"node", "--output", out_.string(), "--run", "ports"};
    std::vector<std::string> all = {"train.epochs=1",       "data.train_limit=2560",
                                    "data.test_limit=500",  "train.threads=1",
                                    "run.progress=\"off\"", "fabric.provider=\"tcp;ofi_rxm\""};
    all.insert(all.end(), sets.begin(), sets.end());
    for (const std::string& s : all) {
      args.push_back("--set");
      args.push_back(s);
    }
    return args;
  }

  fs::path out_;
};

// Node 0 waits for node 1 (min_nodes = 2), so its port is read while it
// waits; node 1's is polled from its start until it exits, since it forms
// the cluster and trains at once.
TEST_F(DataPortProcessTest, TwoNodesListenOnTheirSetDataPortsAndTrainOneModel) {
  testing::PortPicker ports(static_cast<uint32_t>(getpid()) ^ 0xda7a);
  const std::string control[2] = {"127.0.0.1:" + std::to_string(ports.Next()),
                                  "127.0.0.1:" + std::to_string(ports.Next())};
  const uint16_t data[2] = {ports.Next(), ports.Next()};
  std::unique_ptr<ChorusProcess> nodes[2];
  const auto start = [&](int i) {
    nodes[i] = std::make_unique<ChorusProcess>(
        NodeArgs({"exchange.kind=\"allreduce\"", "cluster.min_nodes=2", "cluster.token=\"ports\"",
                  "run.node_name=\"node" + std::to_string(i) + "\"", "cluster.listen=\"" + control[i] + "\"",
                  "cluster.bootstrap=[\"" + control[1 - i] + "\"]", "cluster.heartbeat_interval_s=0.1",
                  "fabric.port=" + std::to_string(data[i])}));
  };
  start(0);
  bool listened[2] = {false, false};
  for (int i = 0; i < 3000 && !listened[0] && nodes[0]->Running(); ++i) {
    listened[0] = ListensOn(data[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(listened[0]) << "node0 never listened on its fabric.port " << data[0] << "\n" << nodes[0]->Output();
  start(1);
  while (!listened[1] && nodes[1]->Running()) listened[1] = ListensOn(data[1]);
  EXPECT_TRUE(listened[1]) << "node1 never listened on its fabric.port " << data[1];

  std::set<std::string> checksums;
  for (int i : {0, 1}) {
    const std::optional<int> status = nodes[i]->Wait(120);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << nodes[i]->Output();
    const nlohmann::json summary = ReadJson(out_ / "ports" / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << nodes[i]->Output();
    checksums.insert(summary["parameter_checksum"].get<std::string>());
  }
  EXPECT_EQ(checksums.size(), 1u) << "one model";
}

TEST_F(DataPortProcessTest, ADataPortInUseExitsNamingTheSettingAndThePort) {
  const int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int taken = ntohs(addr.sin_port);

  testing::PortPicker ports(static_cast<uint32_t>(getpid()) ^ 0xb05e);
  // A member of a cluster to be (a lone node without bootstrap peers opens no data plane).
  ChorusProcess node(NodeArgs({"exchange.kind=\"allreduce\"", "cluster.min_nodes=2",
                               "cluster.listen=\"127.0.0.1:" + std::to_string(ports.Next()) + "\"",
                               "cluster.bootstrap=[\"127.0.0.1:" + std::to_string(ports.Next()) + "\"]",
                               "fabric.port=" + std::to_string(taken)}));
  const std::optional<int> status = node.Wait(60);
  close(holder);
  ASSERT_TRUE(status.has_value()) << "still running\n" << node.Output();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << node.Output();
  const std::string output = node.Output();
  EXPECT_NE(output.find("fabric.port = " + std::to_string(taken)), std::string::npos) << output;
  EXPECT_NE(output.find("port " + std::to_string(taken) + " is in use"), std::string::npos) << output;
}

}  // namespace
}  // namespace chorus::node
