// Forming with no designated founder, as separate `chorus cluster` processes
// on 127.0.0.1: nodes started by hand in a random order, each bootstrapping
// through one or two others (a graph connected only when taken as
// undirected), form exactly one cluster; so do the two local-pair example
// configs, which bootstrap through each other, in either order. The random
// runs also time the formation of 8 nodes (printed for the docs, not asserted).
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

using testing::ChorusProcess;
using testing::ExitStatus;
using testing::PortPicker;
using SteadyClock = std::chrono::steady_clock;

std::string Loopback(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

std::string Quoted(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "\"" : ", \"") + s + "\"";
  return "[" + out + "]";
}

// Each node's bootstrap list, as node indices: one or two other nodes. A
// random spanning tree (each node but the root names its parent), the root
// naming one more random node, and now and then one more entry somewhere:
// connected when taken as undirected. Redrawn when every node but one names
// only that one (a designated founder in all but name), which two nodes
// cannot avoid.
std::vector<std::vector<int>> BootstrapGraph(int n, std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  while (true) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<int>> names(n);
    for (int k = 1; k < n; ++k) names[order[k]].push_back(order[pick(0, k - 1)]);
    const int root = order[0];
    int other = pick(0, n - 2);
    names[root].push_back(other >= root ? other + 1 : other);
    if (n > 2 && pick(0, 1) == 1) {
      const int u = pick(0, n - 1);
      const int v = pick(0, n - 1);
      if (v != u && names[u].size() < 2 && std::find(names[u].begin(), names[u].end(), v) == names[u].end()) {
        names[u].push_back(v);
      }
    }
    bool star = false;
    for (int x = 0; x < n && n > 2; ++x) {
      bool all = true;
      for (int i = 0; i < n; ++i) all &= i == x || names[i] == std::vector<int>{x};
      star |= all;
    }
    if (!star) return names;
  }
}

struct FormationRun {
  double formation_s = -1;  // first process start to the last "epoch 0" line
  double after_last_s = -1;  // last process start to the last "epoch 0" line
  std::string failure;      // empty when every node formed the one cluster and exited 0
};

// Starts `n` nodes (n0..n<n-1>, min_nodes n) in a random order, each 0-300 ms
// after the first start, with BootstrapGraph's lists; checks that all log the
// same epoch 0 with every node, and exit 0 after holding it `hold_s`.
FormationRun RunFormation(int n, uint32_t seed, PortPicker& ports, double hold_s) {
  std::mt19937 rng(seed);
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) addresses.push_back(Loopback(ports.Next()));
  const std::vector<std::vector<int>> graph = BootstrapGraph(n, rng);
  std::vector<int> offset_ms(n);
  for (int& o : offset_ms) o = std::uniform_int_distribution<int>(0, 300)(rng);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return offset_ms[a] < offset_ms[b]; });

  std::string setup = "seed " + std::to_string(seed) + ", start order";
  for (int i : order) setup += " n" + std::to_string(i) + "@" + std::to_string(offset_ms[i]) + "ms";
  setup += ", bootstrap";
  for (int i = 0; i < n; ++i) {
    setup += " n" + std::to_string(i) + "->";
    for (size_t k = 0; k < graph[i].size(); ++k) setup += (k ? "," : "") + std::string("n") + std::to_string(graph[i][k]);
  }

  std::vector<std::unique_ptr<ChorusProcess>> nodes(n);
  const SteadyClock::time_point start = SteadyClock::now();
  SteadyClock::time_point last_start = start;
  for (int i : order) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(offset_ms[i] - offset_ms[order[0]]));
    std::vector<std::string> bootstrap;
    for (int j : graph[i]) bootstrap.push_back(addresses[j]);
    std::vector<std::string> args = {"cluster", "--hold", std::to_string(hold_s)};
    // Heartbeats of a loaded 2-core host: 8 processes must not suspect each other.
    for (const std::string& s :
         {"run.node_name=\"n" + std::to_string(i) + "\"", "cluster.min_nodes=" + std::to_string(n),
          "cluster.listen=\"" + addresses[i] + "\"", "cluster.bootstrap=" + Quoted(bootstrap),
          std::string("cluster.token=\"formation\""), std::string("cluster.heartbeat_interval_s=0.2"),
          std::string("cluster.suspect_timeout_s=2"), std::string("cluster.dead_timeout_s=4"),
          std::string("cluster.join_timeout_s=20")}) {
      args.push_back("--set");
      args.push_back(s);
    }
    last_start = SteadyClock::now();
    nodes[i] = std::make_unique<ChorusProcess>(args);
  }

  // Poll every output until each has its epoch 0 (10 ms apart: the timing's grain).
  const std::regex epoch0(R"(\[control\] epoch 0: members ([^\n]*))");
  std::vector<std::string> members(n);
  std::vector<double> formed_at(n, -1);
  const SteadyClock::time_point give_up = start + std::chrono::seconds(25);
  int formed = 0;
  while (formed < n && SteadyClock::now() < give_up) {
    for (int i = 0; i < n; ++i) {
      if (formed_at[i] >= 0) continue;
      const std::string out = nodes[i]->Output();
      std::smatch m;
      if (std::regex_search(out, m, epoch0)) {
        formed_at[i] = std::chrono::duration<double>(SteadyClock::now() - start).count();
        members[i] = m[1].str();
        ++formed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FormationRun run;
  std::string expected;
  for (int i = 0; i < n; ++i) expected += (i ? " n" : "n") + std::to_string(i);
  for (int i = 0; i < n && run.failure.empty(); ++i) {
    if (members[i] != expected) {
      run.failure = "n" + std::to_string(i) + " logged epoch 0 with members '" + members[i] + "', not '" + expected +
                    "' (" + setup + ")\n" + nodes[i]->Output();
    }
  }
  if (run.failure.empty()) {
    run.formation_s = *std::max_element(formed_at.begin(), formed_at.end());
    run.after_last_s = run.formation_s - std::chrono::duration<double>(last_start - start).count();
  }
  for (int i = 0; i < n; ++i) {
    const int status = ExitStatus(*nodes[i], hold_s + 15);
    if (status != 0 && run.failure.empty()) {
      run.failure = "n" + std::to_string(i) + " exited with " + std::to_string(status) + " (" + setup + ")\n" +
                    nodes[i]->Output();
    }
  }
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Runs of n nodes (2, 4 or 8, one test each so that ctest runs them side by
// side), every run from its own fixed seed: 8 in the suite, and
// CHORUS_FORMATION_RUNS of them when set, for a longer soak.
int FormationRuns() {
  const char* env = std::getenv("CHORUS_FORMATION_RUNS");
  return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 8;
}

class FormationSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(FormationSizeTest, NodesStartedInAnyOrderFormExactlyOneCluster) {
  const int n = GetParam();
  const int runs = FormationRuns();
  // Long enough for every node to see the others' epoch 0 before any leaves.
  constexpr double kHoldS = 0.5;
  PortPicker ports(20240611u + static_cast<uint32_t>(n));
  std::vector<double> times;
  std::vector<double> after_last;
  for (int r = 0; r < runs; ++r) {
    const uint32_t seed = 1000u * static_cast<uint32_t>(n) + static_cast<uint32_t>(r);
    FormationRun run = RunFormation(n, seed, ports, kHoldS);
    if (!run.failure.empty()) {
      ADD_FAILURE() << n << " nodes, run " << r << ": " << run.failure;
      continue;
    }
    times.push_back(run.formation_s);
    after_last.push_back(run.after_last_s);
  }
  if (times.empty()) return;
  // From the first start: includes the 0-300 ms spread of the starts and
  // each process's own start-up before it listens.
  std::printf("formation of %d nodes: median %.2f s over %zu runs (max %.2f s; from the last start: median %.2f s)\n",
              n, Median(times), times.size(), *std::max_element(times.begin(), times.end()), Median(after_last));
  std::fflush(stdout);
}

INSTANTIATE_TEST_SUITE_P(Nodes, FormationSizeTest, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param); });

// configs/examples/local-pair-node{0,1}.toml as written (each bootstraps
// through the other, min_nodes 2), on ports of this test's choosing.
TEST(FormationProcessTest, TheLocalPairExampleConfigsFormInEitherOrderAndTrainToTheEnd) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no dataset";
  }
  PortPicker ports(7100);
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("chorus-local-pair-" + std::to_string(getpid()));
  for (int first : {0, 1}) {
    SCOPED_TRACE("node" + std::to_string(first) + " first");
    const std::string address[2] = {Loopback(ports.Next()), Loopback(ports.Next())};
    // The files as written (shm, MLP, the bootstrap shape), on free ports and
    // a slice of the data so that the test stays short.
    auto start = [&](int i) {
      const std::string config = std::string(CHORUS_SOURCE_DIR) + "/configs/examples/local-pair-node" +
                                 std::to_string(i) + ".toml";
      return std::make_unique<ChorusProcess>(std::vector<std::string>{
          "node", config, "--epochs", "1", "--set", "cluster.listen=\"" + address[i] + "\"", "--set",
          "cluster.bootstrap=" + Quoted({address[1 - i]}), "--set", "run.output_dir=\"" + out.string() + "\"",
          "--set", "run.progress=\"off\"", "--set", "data.train_limit=4000", "--set", "data.test_limit=500"});
    };
    std::unique_ptr<ChorusProcess> nodes[2];
    nodes[first] = start(first);
    // The first probes an address where nothing listens yet, a few times.
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    nodes[1 - first] = start(1 - first);
    for (auto& p : nodes) {
      EXPECT_TRUE(p->WaitFor(R"(\[control\] epoch 0: members node0 node1\n)", 15).has_value()) << p->Output();
    }
    for (auto& p : nodes) EXPECT_EQ(ExitStatus(*p, 120), 0) << p->Output();
    std::string checksum[2];
    for (int i : {0, 1}) {
      const nlohmann::json summary = testing::ReadJson(out / "local-pair" / ("node" + std::to_string(i)) / "summary.json");
      ASSERT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << nodes[i]->Output();
      checksum[i] = summary["parameter_checksum"].get<std::string>();
    }
    EXPECT_EQ(checksum[0], checksum[1]) << "the pair ended with two models";
    std::filesystem::remove_all(out);
  }
}

}  // namespace
}  // namespace chorus::node
