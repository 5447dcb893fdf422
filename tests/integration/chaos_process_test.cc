// `chorus chaos` as a user runs it, short: four nodes of an example config
// under 30 s of kills, freezes, restarts and (as root) partitions (one every
// 5 s on average) from a fixed seed, in training sized to a minute (fewer nodes
// on 2 cores train faster: sized to the faults' length alone, it ended
// before them, and a node restarted then had no run left to join). The cluster must never stall past the bound, every node that
// finishes must hold the same model, and every fault must be survived; the
// run folder has chaos.jsonl with the faults and samples over time.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/launch/emulated_link.h"
#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::kConfigsDir;
using testing::kDataDir;

bool HaveData() { return fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz"); }

struct ChaosRun {
  std::string output;
  int status = -1;
  std::vector<nlohmann::json> events;
};

std::vector<std::string> ChaosArgs(const std::string& config, const std::string& faults, const std::string& out,
                                   const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"chaos", std::string(kConfigsDir) + "/" + config, "--nodes", "4",
                                   "--minutes", "0.5", "--train-minutes", "0.75", "--mtbf", "5", "--seed", "3",
                                   "--faults", faults, "--baseline-seconds", "6", "--first-fault", "2",
                                   "--max-freeze", "3", "--hang-bound", "45", "--out", out};
  args.insert(args.end(), extra.begin(), extra.end());
  for (const std::string& s : {"data.dir=\"" + std::string(kDataDir) + "\"", std::string("data.train_limit=12000"),
                               std::string("data.test_limit=2000"), std::string("train.threads=1"),
                               // chaos stretches train.epochs to its minutes: the examples' LARS
                               // base_lr of 2.0 collapses the MLP within tens of epochs at its peak.
                               std::string("train.base_lr=0.5"),
                               std::string("cluster.heartbeat_interval_s=0.1"),
                               std::string("cluster.suspect_timeout_s=0.5"), std::string("cluster.dead_timeout_s=1.0"),
                               std::string("cluster.join_timeout_s=20")}) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

ChaosRun RunChaos(const std::string& config, const std::string& faults, const std::string& out,
                  const std::vector<std::string>& extra = {}) {
  fs::remove_all(out);
  ChorusProcess chaos(ChaosArgs(config, faults, out, extra));
  ChaosRun run;
  const auto status = chaos.Wait(420.0);
  run.output = chaos.Output();
  if (status) run.status = *status;
  std::ifstream in(out + "/chaos.jsonl");
  for (std::string line; std::getline(in, line);) run.events.push_back(nlohmann::json::parse(line));
  return run;
}

// Every node finishes and none ends by itself: a node removed while frozen
// or cut off, or whose part of a split cluster yielded, rejoins by itself
// (join only, so that single-node parts never found a second cluster).
void ExpectSurvived(const ChaosRun& run) {
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  std::smatch m;
  const std::regex summary(R"(chaos summary: (\d+) faults injected .*?, (\d+) survived \(training resumed after them\), (?:\d+ too late to tell, )?(\d+) hangs .*?(\d+) divergent replicas of (\d+) finished)");
  ASSERT_TRUE(std::regex_search(run.output, m, summary)) << run.output;
  const int injected = std::stoi(m[1]), survived = std::stoi(m[2]), hangs = std::stoi(m[3]);
  const int divergent = std::stoi(m[4]), finished = std::stoi(m[5]);
  EXPECT_GE(injected, 3) << run.output;
  EXPECT_EQ(survived, injected) << run.output;
  EXPECT_EQ(hangs, 0) << run.output;
  EXPECT_EQ(divergent, 0) << run.output;
  EXPECT_EQ(finished, 4) << run.output;
  EXPECT_NE(run.output.find(" 0 nodes ended by themselves"), std::string::npos) << run.output;
  // Replicas that agree on a collapsed model (10% on ten classes) lost the run.
  const std::regex accuracy(R"(finished \(test accuracy ([0-9.]+))");
  ASSERT_TRUE(std::regex_search(run.output, m, accuracy)) << run.output;
  EXPECT_GT(std::stod(m[1]), 0.7) << run.output;
  // The throughput retained is against fault-free runs before and after.
  const std::regex baselines(R"(fault-free, the mean of (\d+) before and (\d+) after\))");
  ASSERT_TRUE(std::regex_search(run.output, m, baselines)) << run.output;
  EXPECT_GT(std::stoi(m[1]), 0) << run.output;
  EXPECT_GT(std::stoi(m[2]), 0) << run.output;
  int faults = 0, samples = 0;
  bool summary_event = false;
  for (const nlohmann::json& e : run.events) {
    faults += e["kind"] == "fault";
    samples += e["kind"] == "sample";
    summary_event |= e["kind"] == "summary";
  }
  EXPECT_GE(faults, injected);
  EXPECT_GT(samples, 10);  // one a second while the cluster trains (about 45 s here)
  EXPECT_TRUE(summary_event);
}

// One ring all-reduce run meets every kind of fault: kills, freezes, restarts
// and (as root, in network namespaces) partitions, from a seed whose first
// 30 s hold each of them.
TEST(ChaosProcessTest, ARingAllReduceClusterSurvivesKillsFreezesRestartsAndPartitions) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST at " << kDataDir;
  const bool partitions = EmulatedLink::Available().ok();
  const ChaosRun run = RunChaos("allreduce-ring.toml", partitions ? "kill,stop,restart,partition" : "kill,stop,restart",
                                "/tmp/chorus_chaos_test_ring", {"--max-partition", "4"});
  ExpectSurvived(run);
  EXPECT_NE(run.output.find(": kill node"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(": stop node"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("first step"), std::string::npos) << "a restarted node trained:\n" << run.output;
  if (partitions) {
    EXPECT_NE(run.output.find("network namespaces"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(": partition node"), std::string::npos) << run.output;
  }
}

// Pairwise gossip with each node at its own pace (train.stop = "samples"):
// kills, freezes and restarts never end a node, and the nodes end on one model.
TEST(ChaosProcessTest, AnOwnPacePairwiseClusterSurvivesKillsFreezesAndRestarts) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST at " << kDataDir;
  const ChaosRun run = RunChaos("gossip-pairwise.toml", "kill,stop,restart", "/tmp/chorus_chaos_test_pairwise",
                                {"--set", "train.stop=\"samples\""});
  ExpectSurvived(run);
}

// Ctrl-C (here SIGTERM) ends a chaos run: the launch forwards it, nothing
// restarts the nodes that stop for it, and the summary still comes. It checks
// no throughput, so it runs beside other tests (not a ChaosProcessTest).
TEST(ChaosSignalProcessTest, ASignalEndsTheRunWithoutRestartingAnyNode) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST at " << kDataDir;
  const std::string out = "/tmp/chorus_chaos_test_signal";
  fs::remove_all(out);
  ChorusProcess chaos(ChaosArgs("allreduce-ring.toml", "kill,stop,restart", out, {}));
  ASSERT_TRUE(chaos.WaitFor(R"(fault 2: )", 120.0)) << chaos.Output();
  chaos.Signal(SIGTERM);
  const auto status = chaos.Wait(90.0);
  ASSERT_TRUE(status) << "chaos did not end after SIGTERM:\n" << chaos.Output();
  const std::string output = chaos.Output();
  EXPECT_NE(output.find("stopped by a signal"), std::string::npos) << output;
  EXPECT_NE(output.find("chaos summary:"), std::string::npos) << output;
  const size_t stopped = output.find("stopped by a signal");
  EXPECT_EQ(output.find("ended by itself", stopped), std::string::npos) << output;
  EXPECT_EQ(output.find("the faults are over", stopped), std::string::npos) << output;
  EXPECT_EQ(output.find("after the faults", stopped), std::string::npos) << output;
}

}  // namespace
}  // namespace chorus::node
