// `chorus launch`: starts N local `chorus cluster` processes, prefixes their
// lines, stops them cleanly, and fails naming each node that did not exit 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "tests/integration/control_test_process.h"
#include "node/launch/launcher.h"

namespace chorus::node {
namespace {

using testing::ChorusProcess;
using testing::FastClusterSets;

std::vector<std::string> LaunchArgs(int n, const std::string& hold) {
  std::vector<std::string> args = {"launch", "-n", std::to_string(n), "--command", "cluster"};
  for (const std::string& s : FastClusterSets("launch-test")) args.push_back(s);
  args.insert(args.end(), {"--", "--hold", hold});
  return args;
}

int ExitStatus(ChorusProcess& p, double timeout_s) {
  std::optional<int> status = p.Wait(timeout_s);
  if (!status) return -1;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
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
