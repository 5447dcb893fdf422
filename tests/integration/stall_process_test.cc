// A member whose training stalls while its process lives: four `chorus node`
// processes train (ring all-reduce, D-PSGD, DiLoCo), and one node's training thread holds for longer than a
// data-plane operation may wait (CHORUS_FAULT_STALL) while its control
// plane keeps answering. The others' exchange fails, but no member is gone:
// no death starts a new membership epoch. They ask for one over the same
// members, the stalled node meets them in it when it comes back, and all
// four end with one model that trained.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;

struct StallVariant {
  std::string name;
  std::string config;  // under configs/
  int stalled = 0;     // the node whose training stalls (node0 coordinates)
};
void PrintTo(const StallVariant& v, std::ostream* os) { *os << v.name; }

class StallProcessTest : public ::testing::TestWithParam<StallVariant> {};

// The stall (14 s) outlasts a data-plane wait (fabric.op_timeout_s, 4 s) and
// the others' wait for a new epoch after their exchange failed, had they
// waited only for a death (2 * cluster.dead_timeout_s + 10 = 16 s, from 4 s):
// before they asked for an epoch over the same members, every node gave up
// the run there. They ask 6 s after their failure (2 * dead_timeout_s), 4 s
// before the stalled node comes back: the view they asked for has ended its
// operations of the old epoch by then, so it meets them at once.
TEST_P(StallProcessTest, TheOthersReformWithTheStalledMemberAndAllEndWithOneModel) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const StallVariant& v = GetParam();
  const std::string name = "stall-" + v.name;
  const fs::path out = fs::temp_directory_path() / ("chorus-stall-test-" + std::to_string(getpid()));
  const int port0 = testing::PortPicker(static_cast<uint32_t>(getpid()) + 17).Next();
  const std::vector<std::string> sets = {
      "cluster.min_nodes=4",           "cluster.heartbeat_interval_s=0.2", "cluster.suspect_timeout_s=1.5",
      "cluster.dead_timeout_s=3",      "cluster.join_timeout_s=30",        "fabric.provider=\"tcp;ofi_rxm\"",
      "fabric.op_timeout_s=4",         "train.threads=1",                  "train.epochs=2",
      "train.batch_size=32",           "train.log_every_steps=10",         "train.eval_every_epochs=0",
      "data.train_limit=6000",         "data.test_limit=1000"};
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < 4; ++i) {
    const std::vector<std::string> env = i == v.stalled ? std::vector<std::string>{"CHORUS_FAULT_STALL=8:14"}
                                                        : std::vector<std::string>{};
    nodes.push_back(std::make_unique<ChorusProcess>(
        testing::HandNodeArgs(v.config, i, port0, out.string(), name, sets), env));
  }
  const auto start = std::chrono::steady_clock::now();
  const auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  };
  const std::vector<nlohmann::json> s = testing::Summaries(nodes, out / name, outputs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  testing::ExpectOneTrainedModel(s, outputs());
  int asked = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].is_object()) continue;
    EXPECT_GE(s[i]["reforms"].get<int>(), 1) << "node" << i << ": " << s[i].dump();
    EXPECT_EQ(s[i]["world_size"], 4) << "node" << i;
    asked += nodes[i]->Output().find("asking for an epoch over the same members") != std::string::npos;
  }
  EXPECT_NE(nodes[static_cast<size_t>(v.stalled)]->Output().find("the training thread stalls"), std::string::npos)
      << outputs();
  EXPECT_GE(asked, 1) << outputs();
  std::printf("%s: node%d stalled 14 s; %d node(s) asked for an epoch over the same members; all four ended with "
              "one model in %.1f s\n", v.name.c_str(), v.stalled, asked, seconds);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Exchanges, StallProcessTest,
                         ::testing::Values(StallVariant{"ring", "allreduce-ring.toml", 0},
                                           StallVariant{"dpsgd", "gossip-dpsgd-ring.toml", 2},
                                           StallVariant{"diloco", "diloco.toml", 1}),
                         [](const ::testing::TestParamInfo<StallVariant>& info) { return info.param.name; });

}  // namespace
}  // namespace chorus::node
