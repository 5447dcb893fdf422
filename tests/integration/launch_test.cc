// `chorus launch`: starts N local `chorus cluster` processes, prefixes their
// lines, stops them cleanly, and fails naming each node that did not exit 0.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"
#include "node/launch/launcher.h"

namespace chorus::node {
namespace {

using testing::ChorusProcess;
using testing::ExitStatus;
using testing::FastClusterSets;

using testing::kDataDir;

std::vector<std::string> LaunchArgs(int n, const std::string& hold) {
  std::vector<std::string> args = {"launch", "-n", std::to_string(n), "--command", "cluster"};
  for (const std::string& s : FastClusterSets("launch-test")) args.push_back(s);
  args.insert(args.end(), {"--", "--hold", hold});
  return args;
}

// Each of `sets` as "--set KEY=VALUE" after `args`.
void AppendSets(const std::vector<std::string>& sets, std::vector<std::string>& args) {
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
}

pid_t PidOf(ChorusProcess& launch, const std::string& node) {
  auto m = launch.WaitFor("launch: started " + node + " \\(pid (\\d+)\\)", 5);
  EXPECT_TRUE(m.has_value()) << launch.Output();
  return m ? static_cast<pid_t>(std::stoi((*m)[1].str())) : -1;
}

TEST(LaunchTest, NodeSetNamesTheNodeAndTheSetting) {
  auto ok = ParseNodeSet("3:cluster.host_group=\"b\"", 4);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->first, 3);
  EXPECT_EQ(ok->second, "cluster.host_group=\"b\"");
  for (const char* bad : {"4:train.slowdown=2", "x:train.slowdown=2", ":train.slowdown=2", "1train.slowdown=2",
                          "1:train.slowdown", "-1:train.slowdown=2"}) {
    auto r = ParseNodeSet(bad, 4);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find(std::string("--node-set '") + bad + "'"), std::string::npos)
        << r.error().message();
    EXPECT_NE(r.error().message().find("NODE in 0..3"), std::string::npos) << r.error().message();
  }
}

TEST(LaunchTest, JoinAfterNamesALateNodeAndItsDelay) {
  auto ok = ParseJoinAfter("2:1.5", 3);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->first, 2);
  EXPECT_DOUBLE_EQ(ok->second, 1.5);
  ok = ParseJoinAfter("1:0", 2);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_DOUBLE_EQ(ok->second, 0.0);
  // node0 holds the bootstrap port; nodes past -n; no delay; negative, or not a number.
  for (const char* bad : {"0:1", "3:1", "x", "2", "2:", ":1", "2:-1", "2:1s", "2:nan", "2:inf", "-1:1"}) {
    auto r = ParseJoinAfter(bad, 3);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find(std::string("--join-after '") + bad + "'"), std::string::npos)
        << r.error().message();
    EXPECT_NE(r.error().message().find("NODE in 1..2"), std::string::npos) << r.error().message();
  }
}

TEST(LaunchTest, ABadJoinAfterIsAUsageError) {
  for (const char* bad : {"0:1", "5:1", "x", "2:-1"}) {
    SCOPED_TRACE(bad);
    std::vector<std::string> args = LaunchArgs(3, "1");
    args.insert(args.begin() + 1, {"--join-after", bad});
    ChorusProcess launch(args);
    EXPECT_EQ(ExitStatus(launch, 10), 2) << launch.Output();
    EXPECT_NE(launch.Output().find(std::string("--join-after '") + bad + "'"), std::string::npos)
        << launch.Output();
    EXPECT_EQ(launch.Output().find("launch: started"), std::string::npos) << launch.Output();
  }
  std::vector<std::string> twice = LaunchArgs(3, "1");
  twice.insert(twice.begin() + 1, {"--join-after", "2:1", "--join-after", "2:3"});
  ChorusProcess launch(twice);
  EXPECT_EQ(ExitStatus(launch, 10), 2) << launch.Output();
  EXPECT_NE(launch.Output().find("--join-after '2:3': node2 is already late"), std::string::npos) << launch.Output();
}

// node2 starts 1.5 s after the others: node0 and node1 form epoch 0 alone
// (cluster.min_nodes = 2), and node2 is admitted at a later epoch boundary
// (`chorus cluster` calls AdvanceEpochIfPending every second).
TEST(LaunchTest, ALateNodeJoinsTheRunningCluster) {
  std::vector<std::string> args = LaunchArgs(3, "4");
  args.insert(args.begin() + 1, {"--join-after", "2:1.5"});
  ChorusProcess launch(args);
  EXPECT_EQ(ExitStatus(launch, 30), 0) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("launch: all 2 on-time nodes are in epoch 0"), std::string::npos) << out;
  EXPECT_NE(out.find("launch: all 3 nodes exited with status 0"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(launch: started node2 \(pid \d+\), \d+\.\d+ s after launch)")))
      << out;
  const size_t node2_first = out.find("[node2] ");
  ASSERT_NE(node2_first, std::string::npos) << out;
  for (const char* node : {"node0", "node1"}) {
    std::smatch epoch0;
    ASSERT_TRUE(std::regex_search(out, epoch0, std::regex(std::string(R"(\[)") + node +
                                                          R"(\] [^\n]*epoch 0: members node0 node1\n)")))
        << node << "\n" << out;
    EXPECT_LT(static_cast<size_t>(epoch0.position(0)), node2_first) << node << "\n" << out;
  }
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[node2\] .*epoch [1-9][0-9]*: members node0 node1 node2)")))
      << out;
}

// A late node whose time comes after the others have all exited has no
// cluster to join: it is never started, and launch fails naming it.
TEST(LaunchTest, ALateNodeIsNotStartedAfterTheClusterFinished) {
  std::vector<std::string> args = LaunchArgs(3, "0.5");
  args.insert(args.begin() + 1, {"--join-after", "2:60"});
  ChorusProcess launch(args);
  EXPECT_EQ(ExitStatus(launch, 20), 1) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("launch: node2 was not started: the cluster finished before its --join-after time"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("[node2]"), std::string::npos) << out;
  EXPECT_EQ(out.find("launch: started node2"), std::string::npos) << out;
}

// SIGINT before a late node's time: the others leave cleanly and the late
// node is never started.
TEST(LaunchTest, ASignalBeforeALateNodesTimeMeansItNeverStarts) {
  std::vector<std::string> args = LaunchArgs(3, "60");
  args.insert(args.begin() + 1, {"--join-after", "2:60"});
  ChorusProcess launch(args);
  ASSERT_TRUE(launch.WaitFor("launch: all 2 on-time nodes are in epoch 0", 20).has_value()) << launch.Output();
  launch.Signal(SIGINT);
  EXPECT_EQ(ExitStatus(launch, 20), 0) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("launch: node2 was not started: launch was stopped by SIGINT before its --join-after time"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("launch: the 2 nodes started exited with status 0; 1 late node was not started"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("[node2]"), std::string::npos) << out;
}

bool HasDataset() { return std::filesystem::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz"); }

// An empty output directory for one test's runs, named after it and this process.
std::filesystem::path FreshOutDir(const std::string& tag) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("chorus-launch-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  return out;
}

// Training: 4 nodes under ring all-reduce, node3 starting 2 s after the
// others. It is admitted at an admission point (every 10 steps), takes the
// live model from a member, and ends with the others' model and step count.
// The run must outlast node3's start and admission by a margin: 4 epochs of
// 48000 images (about 850 steps) train for about 4 s on a 2-core machine
// (some 15000 samples/s per MLP node), where node3, started at 2 s, was
// admitted near step 390; 12000 images would end in 1 s, before it starts.
TEST(LaunchTest, ALateTrainingNodeEndsWithTheSameModel) {
  if (!HasDataset()) GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  const std::filesystem::path out = FreshOutDir("late");
  std::vector<std::string> args = {"launch", "-n", "4", "--join-after", "3:2"};
  for (const std::string& s : FastClusterSets("launch-late-train")) args.push_back(s);
  // Looser failure detection: 4 busy nodes on 2 shared cores are not dead.
  const std::vector<std::string> sets = {
      "run.output_dir=\"" + out.string() + "\"", "run.name=\"late\"", "run.progress=\"off\"", "train.threads=1",
      "cluster.heartbeat_interval_s=0.2", "cluster.suspect_timeout_s=1.5", "cluster.dead_timeout_s=3",
      "train.epochs=4", "data.train_limit=48000", "data.test_limit=1000", "cluster.admit_every_steps=10",
      "cluster.admit_every_s=0",
      "exchange.kind=\"allreduce\"", "exchange.algorithm=\"ring\""};
  AppendSets(sets, args);
  ChorusProcess launch(args);
  ASSERT_EQ(ExitStatus(launch, 240), 0) << launch.Output();
  const std::string text = launch.Output();
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\[node3\] .*epoch [1-9][0-9]*: members node0 node1 node2 node3)")))
      << text;
  std::vector<nlohmann::json> summaries;
  for (int i = 0; i < 4; ++i) {
    std::ifstream in(out / "late" / ("node" + std::to_string(i)) / "summary.json");
    summaries.push_back(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
    ASSERT_TRUE(summaries.back().is_object()) << "node" << i << "\n" << text;
  }
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(summaries[static_cast<size_t>(i)]["parameter_checksum"], summaries[0]["parameter_checksum"])
        << "node" << i;
    EXPECT_EQ(summaries[static_cast<size_t>(i)]["steps"], summaries[0]["steps"]) << "node" << i;
  }
  std::filesystem::remove_all(out);
}

// node0 serves the socket launch bound for it. Frozen past the dead timeout,
// it is removed and rejoins as a new process (cluster.rejoin), which must
// listen by itself: the handed-over socket closed with the old image, and
// its descriptor number held another file when the new image looked at it.
// The run is far longer than the test (the others must still train when
// node0 comes back, however fast this host is); once node0 is a member
// again, SIGINT stops all three.
TEST(LaunchTest, ALaunchedNode0FrozenAndRemovedRejoinsAsANewProcess) {
  if (!HasDataset()) GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  const std::filesystem::path out = FreshOutDir("rejoin");
  std::vector<std::string> args = {"launch", "-n", "3"};
  for (const std::string& s : FastClusterSets("launch-rejoin")) args.push_back(s);
  const std::vector<std::string> sets = {
      "run.output_dir=\"" + out.string() + "\"", "run.name=\"rejoin\"", "run.progress=\"off\"", "train.threads=1",
      "cluster.heartbeat_interval_s=0.2", "cluster.suspect_timeout_s=1", "cluster.dead_timeout_s=2",
      "train.epochs=100", "data.train_limit=60000", "data.test_limit=1000", "train.slowdown=2.0",
      "exchange.kind=\"allreduce\"", "exchange.algorithm=\"ring\""};
  AppendSets(sets, args);
  ChorusProcess launch(args);
  const pid_t node0 = PidOf(launch, "node0");
  ASSERT_GT(node0, 0);
  ASSERT_TRUE(launch.WaitFor("\\[node0\\] .*cluster formed", 60)) << launch.Output();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // training
  ::kill(node0, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ::kill(node0, SIGCONT);
  EXPECT_TRUE(launch.WaitFor("\\[node0\\] .*rejoining the cluster as a new process", 60)) << launch.Output();
  EXPECT_TRUE(launch.WaitFor("\\[node0\\] .*epoch [1-9][0-9]*: members (node0 node1 node2|node1 node2 node0)", 90))
      << launch.Output();
  launch.Signal(SIGINT);
  EXPECT_NE(ExitStatus(launch, 120), 0) << launch.Output();
  const std::string text = launch.Output();
  EXPECT_NE(text.find("launch: stopped by SIGINT: all 3 nodes exited with status 130"), std::string::npos) << text;
  EXPECT_EQ(text.find("the listening socket handed over"), std::string::npos) << text;
  std::filesystem::remove_all(out);
}

TEST(LaunchTest, ThreeNodesStartFormAClusterAndStopCleanly) {
  ChorusProcess launch(LaunchArgs(3, "1.5"));
  EXPECT_EQ(ExitStatus(launch, 20), 0) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("launch: all 3 nodes are in epoch 0"), std::string::npos) << out;
  EXPECT_NE(out.find("launch: all 3 nodes exited with status 0"), std::string::npos) << out;
  // node0, and only node0, serves the socket launch bound for it: no other
  // process can take the bootstrap port between launch picking it and node0
  // listening.
  const std::string handed = ", a socket handed over by the launcher";
  const size_t at = out.find(handed);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.rfind("[node", at), out.rfind("[node0]", at)) << out;
  EXPECT_EQ(out.find(handed, at + 1), std::string::npos) << out;
  for (const char* node : {"node0", "node1", "node2"}) {
    EXPECT_NE(out.find(std::string("[") + node + "] cluster: epoch 0, 3 members"), std::string::npos) << out;
  }
  // Every line comes from the launcher itself or carries a node prefix.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line.rfind("launch: ", 0) == 0 || line.rfind("[node", 0) == 0) << line;
  }
}

// Eight nodes that leave the moment they have epoch 0 confirm each other's
// leave: a Leave that reached a node before its own copy of epoch 0 used to be
// dropped, and that node waited for the dead timeout (about one launch in 4-10).
TEST(LaunchTest, EightNodesLeavingAtOnceConfirmEachOther) {
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> args = {"launch", "-n", "8", "--command", "cluster"};
    for (const std::string& s : FastClusterSets("launch-leave")) args.push_back(s);
    // Slow failure detection, so only a lost leave (not a loaded machine) shows.
    args.insert(args.end(), {"--set", "cluster.suspect_timeout_s=5", "--set", "cluster.dead_timeout_s=10",
                             "--", "--hold", "0"});
    ChorusProcess launch(args);
    EXPECT_EQ(ExitStatus(launch, 60), 0) << launch.Output();
    const std::string out = launch.Output();
    EXPECT_NE(out.find("launch: all 8 nodes exited with status 0"), std::string::npos) << out;
    EXPECT_EQ(out.find("without the others confirming"), std::string::npos) << out;
    EXPECT_EQ(out.find("is suspect"), std::string::npos) << out;
  }
}

TEST(LaunchTest, FailsNamingTheNodesThatDidNotExitCleanly) {
  ChorusProcess launch(LaunchArgs(3, "60"));
  ASSERT_TRUE(launch.WaitFor("launch: all 3 nodes are in epoch 0", 20).has_value()) << launch.Output();
  const pid_t node1 = PidOf(launch, "node1");
  const pid_t node2 = PidOf(launch, "node2");
  ASSERT_GT(node1, 0);
  ASSERT_GT(node2, 0);

  // node1 stops for twice the dead timeout (1 s): the others remove it. When it
  // runs again it learns that from them and exits with status 1.
  kill(node1, SIGSTOP);
  ASSERT_TRUE(launch.WaitFor(R"(\[node0\] .*epoch 1: members node0 node2 \(departed ranks 1\))", 6).has_value())
      << launch.Output();
  kill(node1, SIGCONT);
  EXPECT_TRUE(launch.WaitFor(R"(\[node1\] .*node1 was removed from the cluster at epoch 1)", 5).has_value())
      << launch.Output();
  // It exits at its next epoch boundary (every 1 s): before node2's death,
  // which node0 now sees within a few heartbeats, ends the run.
  EXPECT_TRUE(launch.WaitFor(R"(\[node1\] .*this node is no longer a cluster member)", 5).has_value())
      << launch.Output();

  // node2 dies outright.
  kill(node2, SIGKILL);
  ASSERT_TRUE(launch.WaitFor(R"(\[node0\] .*epoch 2: members node0 \(departed ranks 1\))", 6).has_value())
      << launch.Output();

  // The launcher forwards SIGTERM; node0 leaves cleanly.
  launch.Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(launch, 10), 1) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("node1 exited with status 1"), std::string::npos) << out;
  EXPECT_NE(out.find("node2 was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(out.find("node0 exited"), std::string::npos) << out;
  EXPECT_EQ(out.find("node0 was killed"), std::string::npos) << out;
}

// A node refused at join (here: another model than node0's) can never be part
// of epoch 0, which needs every node of the launch: launch stops the others at
// once and names the node that failed, rather than letting them wait out
// their join timeout (a minute by default; 15 s here).
TEST(LaunchTest, ANodeThatFailsBeforeTheClusterFormsStopsTheOthers) {
  std::vector<std::string> args = LaunchArgs(3, "60");
  const auto dashes = std::find(args.begin(), args.end(), "--");
  args.insert(dashes, {"--node-set", "2:train.model=\"cnn\""});
  ChorusProcess launch(args);
  EXPECT_EQ(ExitStatus(launch, 10), 1) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_NE(out.find("the settings every member must share differ: node0 has train.model = \"mlp\", node2 has "
                     "train.model = \"cnn\""),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("launch: node2 exited with status 1 before the cluster formed; stopping the other nodes"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("launch: node2 exited with status 1 before the cluster formed (its error is above); the "
                     "other nodes were stopped"),
            std::string::npos)
      << out;
  // `chorus cluster` exits at once on a signal while it joins.
  EXPECT_NE(out.find("received SIGTERM while joining the cluster: exiting now"), std::string::npos) << out;
}

}  // namespace
}  // namespace chorus::node
