// `chorus node` as a process, stopped by signals: the first SIGTERM/SIGINT
// while training stops after the step with a checkpoint that --resume
// continues bitwise; a signal before training begins, or a second one, exits
// at once. In every case the exit status is the shell's for the signal.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::ExitStatus;
using testing::ReadJson;

using testing::kDataDir;

class NodeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    out_ = fs::temp_directory_path() / ("chorus-node-test-" + std::to_string(getpid()));
    fs::remove_all(out_);
  }
  void TearDown() override { fs::remove_all(out_); }

  // `chorus node` of run `name`: 2 epochs of 40 steps (batch 64), one thread,
  // then `sets` (KEY=VALUE), then `flags`.
  std::vector<std::string> NodeArgs(const std::string& name, const std::vector<std::string>& sets,
                                    const std::vector<std::string>& flags = {}) const {
    std::vector<std::string> args = {"node", "--output", out_.string(), "--run", name};
    std::vector<std::string> all = {"train.epochs=2",       "data.train_limit=2560", "data.test_limit=500",
                                    "train.threads=1",      "run.progress=\"off\"",  "train.log_every_steps=2"};
    all.insert(all.end(), sets.begin(), sets.end());
    for (const std::string& s : all) {
      args.push_back("--set");
      args.push_back(s);
    }
    args.insert(args.end(), flags.begin(), flags.end());
    return args;
  }
  fs::path NodeDir(const std::string& name) const { return out_ / name / "node0"; }

  fs::path out_;
};

// True once `path` has `lines` lines (within 30 s).
bool WaitForLines(const fs::path& path, int lines) {
  for (int i = 0; i < 1500; ++i) {
    std::ifstream in(path);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    if (n >= lines) return true;
    usleep(20000);
  }
  return false;
}

// Stopped mid-epoch and resumed, a run ends with the model of the run that was
// never stopped: the checkpoint keeps how far into the epoch it was, and the
// resumed run skips exactly those batches.
TEST_F(NodeProcessTest, StopCheckpointsMidEpochAndResumeEndsWithTheUninterruptedModel) {
  ChorusProcess whole(NodeArgs("whole", {}));
  ASSERT_EQ(ExitStatus(whole, 120), 0) << whole.Output();
  auto expected = ReadJson(NodeDir("whole") / "summary.json");
  ASSERT_TRUE(expected.is_object()) << whole.Output();

  // Slowed down (each step sleeps 20 times its compute) so the stop lands
  // inside the first epoch.
  ChorusProcess stopped(NodeArgs("stopped", {"train.slowdown=20.0"}));
  ASSERT_TRUE(WaitForLines(NodeDir("stopped") / "metrics.jsonl", 2)) << stopped.Output();
  stopped.Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(stopped, 30), 128 + SIGTERM) << stopped.Output();
  auto at = stopped.WaitFor("stopped by SIGTERM at step (\\d+) \\(epoch 1, batch (\\d+) of 40\\)", 1);
  ASSERT_TRUE(at) << stopped.Output();
  EXPECT_GT(std::stoi((*at)[2].str()), 0) << stopped.Output();
  EXPECT_TRUE(fs::exists(NodeDir("stopped") / "checkpoint.safetensors"));
  EXPECT_FALSE(fs::exists(NodeDir("stopped") / "summary.json")) << "a stopped run did not finish";

  ChorusProcess resumed(NodeArgs("stopped", {}, {"--resume"}));
  ASSERT_EQ(ExitStatus(resumed, 120), 0) << resumed.Output();
  EXPECT_TRUE(resumed.WaitFor("resumed from .* in epoch 1, step \\d+, \\d+ batches into the epoch", 1))
      << resumed.Output();
  auto summary = ReadJson(NodeDir("stopped") / "summary.json");
  ASSERT_TRUE(summary.is_object()) << resumed.Output();
  EXPECT_EQ(summary["steps"], expected["steps"]);
  EXPECT_EQ(summary["parameter_checksum"], expected["parameter_checksum"]);
  EXPECT_EQ(summary["test_accuracy"], expected["test_accuracy"]);
}

// --resume of a run that finished: the node says so and exits 0; its
// summary, metrics and model are left as they were (a resumed finished run
// used to rewrite summary.json with 0 samples/s). With more epochs it trains
// on from the checkpoint.
TEST_F(NodeProcessTest, ResumingAFinishedRunRewritesNothing) {
  ChorusProcess whole(NodeArgs("done", {}));
  ASSERT_EQ(ExitStatus(whole, 120), 0) << whole.Output();
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string summary = read(NodeDir("done") / "summary.json");
  const std::string metrics = read(NodeDir("done") / "metrics.jsonl");
  const std::string log = read(NodeDir("done") / "log.txt");
  ASSERT_FALSE(summary.empty()) << whole.Output();

  ChorusProcess again(NodeArgs("done", {}, {"--resume"}));
  ASSERT_EQ(ExitStatus(again, 60), 0) << again.Output();
  EXPECT_NE(again.Output().find("finished this run already (2 of 2 epochs"), std::string::npos) << again.Output();
  EXPECT_EQ(read(NodeDir("done") / "summary.json"), summary);
  EXPECT_EQ(read(NodeDir("done") / "metrics.jsonl"), metrics);
  EXPECT_EQ(read(NodeDir("done") / "log.txt"), log);

  ChorusProcess more(NodeArgs("done", {"train.epochs=3"}, {"--resume"}));
  ASSERT_EQ(ExitStatus(more, 120), 0) << more.Output();
  EXPECT_TRUE(more.WaitFor("resumed from .* after epoch 2, step 80", 1)) << more.Output();
  EXPECT_EQ(ReadJson(NodeDir("done") / "summary.json")["steps"], 120);
}

// Two nodes started by hand without run.node_name, each bootstrapping from
// the other: each writes the folder of its rank in the cluster (they used to
// share runs/<run>/node0 and interleave their records).
TEST_F(NodeProcessTest, NodesStartedByHandWithoutNamesWriteOneFolderEach) {
  testing::PortPicker ports(static_cast<uint32_t>(getpid()) ^ 0xf01d);
  const std::string address[2] = {"127.0.0.1:" + std::to_string(ports.Next()),
                                   "127.0.0.1:" + std::to_string(ports.Next())};
  std::unique_ptr<ChorusProcess> nodes[2];
  for (int i : {0, 1}) {
    nodes[i] = std::make_unique<ChorusProcess>(NodeArgs(
        "noname", {"exchange.kind=\"allreduce\"", "cluster.min_nodes=2", "cluster.token=\"noname\"",
                   "cluster.listen=\"" + address[i] + "\"", "cluster.bootstrap=[\"" + address[1 - i] + "\"]",
                   "cluster.heartbeat_interval_s=0.1", "train.epochs=1"}));
  }
  for (int i : {0, 1}) ASSERT_EQ(ExitStatus(*nodes[i], 120), 0) << nodes[i]->Output();
  std::set<std::string> checksums;
  for (const char* folder : {"node0", "node1"}) {
    const nlohmann::json summary = ReadJson(out_ / "noname" / folder / "summary.json");
    ASSERT_TRUE(summary.is_object()) << folder << "\n" << nodes[0]->Output() << nodes[1]->Output();
    EXPECT_EQ(summary["node"], folder);
    EXPECT_EQ(summary["rank"].get<int>(), folder == std::string("node0") ? 0 : 1);
    checksums.insert(summary["parameter_checksum"].get<std::string>());
  }
  EXPECT_EQ(checksums.size(), 1u) << "one model";
}

// A second process for a folder a live node writes is refused, naming the
// folder and the first node's pid; the first trains on.
TEST_F(NodeProcessTest, ASecondLiveNodeInOneFolderIsRefused) {
  ChorusProcess first(NodeArgs("shared", {"train.slowdown=50.0"}));
  ASSERT_TRUE(first.WaitFor("model mlp", 60)) << first.Output();
  ChorusProcess second(NodeArgs("shared", {}));
  EXPECT_EQ(ExitStatus(second, 60), 1) << second.Output();
  EXPECT_TRUE(second.WaitFor("node0 is in use by another live node \\(pid \\d+\\)", 1)) << second.Output();
  first.Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(first, 30), 128 + SIGTERM) << first.Output();
  EXPECT_EQ(first.Output().find("in use by another"), std::string::npos);
}

// A second signal does not wait for the step: the process exits at once.
TEST_F(NodeProcessTest, SecondSignalExitsAtOnce) {
  // Each step sleeps 3000 times its compute: seconds.
  ChorusProcess node(NodeArgs("second", {"train.slowdown=3000.0"}));
  ASSERT_TRUE(node.WaitFor("model mlp", 60)) << node.Output();
  usleep(300000);
  node.Signal(SIGINT);
  ASSERT_TRUE(node.WaitFor("received SIGINT: stopping after this step", 5)) << node.Output();
  node.Signal(SIGINT);
  EXPECT_EQ(ExitStatus(node, 5), 128 + SIGINT) << node.Output();
  EXPECT_NE(node.Output().find("received SIGINT again: exiting now"), std::string::npos) << node.Output();
}

// Waiting to form a cluster there is nothing to save: the first signal exits.
TEST_F(NodeProcessTest, SignalWhileJoiningExitsAtOnce) {
  std::vector<std::string> sets = {"exchange.kind=\"allreduce\"", "cluster.min_nodes=2",
                                   "cluster.join_timeout_s=60"};
  ChorusProcess node(NodeArgs("joining", sets));
  ASSERT_TRUE(node.WaitFor("listening on", 30)) << node.Output();
  node.Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(node, 5), 128 + SIGTERM) << node.Output();
  EXPECT_NE(node.Output().find("received SIGTERM before training began: exiting now"), std::string::npos)
      << node.Output();
}

}  // namespace
}  // namespace chorus::node
