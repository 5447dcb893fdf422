// `chorus node` as a process, stopped by signals: the first SIGTERM/SIGINT
// while training stops after the step with a checkpoint that --resume
// continues bitwise; a signal before training begins, or a second one, exits
// at once. In every case the exit status is the shell's for the signal.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
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

// The exit status, or the shell's 128 + signal, of a process that ended within `timeout_s`.
int ExitStatus(ChorusProcess& p, double timeout_s) {
  std::optional<int> status = p.Wait(timeout_s);
  if (!status) return -1;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

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
  EXPECT_TRUE(resumed.WaitFor("resumed from .* at epoch 0, step \\d+, \\d+ batches into the epoch", 1))
      << resumed.Output();
  auto summary = ReadJson(NodeDir("stopped") / "summary.json");
  ASSERT_TRUE(summary.is_object()) << resumed.Output();
  EXPECT_EQ(summary["steps"], expected["steps"]);
  EXPECT_EQ(summary["parameter_checksum"], expected["parameter_checksum"]);
  EXPECT_EQ(summary["test_accuracy"], expected["test_accuracy"]);
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
