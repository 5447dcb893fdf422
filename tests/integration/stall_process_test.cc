// A member whose training stalls while its process lives: four `chorus node`
// processes train (ring all-reduce, D-PSGD, DiLoCo), and one node's training thread holds for longer than a
// data-plane operation may wait (CHORUS_FAULT_STALL) while its control
// plane keeps answering. The others' exchange fails, but no member is gone:
// no death starts a new membership epoch. They ask for one over the same
// members, the stalled node meets them in it when it comes back, and all
// four end with one model that trained. A member whose training hangs past
// the re-form's deadline is dropped instead, and the others train on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
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

// `n` (default four) `chorus node` processes of `config` (run `name`), node
// `stalled` with CHORUS_FAULT_STALL=`stall` in its environment and
// `stalled_sets` on top of the settings below and `sets_for_all`.
struct StalledCluster {
  StalledCluster(const std::string& config, const std::string& name, int stalled, const std::string& stall,
                 const std::vector<std::string>& stalled_sets = {}, const std::vector<std::string>& sets_for_all = {},
                 int n = 4)
      : out(fs::temp_directory_path() / ("chorus-stall-test-" + std::to_string(getpid()))), run(out / name) {
    const int port0 = testing::PortPicker(static_cast<uint32_t>(getpid()) + 17).Next();
    const std::vector<std::string> sets = {
        "cluster.min_nodes=" + std::to_string(n), "cluster.heartbeat_interval_s=0.2", "cluster.suspect_timeout_s=1.5",
        "cluster.dead_timeout_s=3", "cluster.join_timeout_s=30",        "fabric.provider=\"tcp;ofi_rxm\"",
        "fabric.op_timeout_s=4",    "train.threads=1",                  "train.epochs=2",
        "train.batch_size=32",      "train.log_every_steps=10",         "train.eval_every_epochs=0",
        "data.train_limit=6000",    "data.test_limit=1000"};
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> env, own = sets;
      own.insert(own.end(), sets_for_all.begin(), sets_for_all.end());
      if (i == stalled) {
        env.push_back("CHORUS_FAULT_STALL=" + stall);
        own.insert(own.end(), stalled_sets.begin(), stalled_sets.end());
      }
      nodes.push_back(
          std::make_unique<ChorusProcess>(testing::HandNodeArgs(config, i, port0, out.string(), name, own), env));
    }
  }
  ~StalledCluster() { fs::remove_all(out); }
  std::string Outputs() const {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  }

  fs::path out, run;
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
};

// The stall (14 s) outlasts a data-plane wait (fabric.op_timeout_s, 4 s) and
// the others' wait for a new epoch after their exchange failed, had they
// waited only for a death (2 * cluster.dead_timeout_s + 10 = 16 s, from 4 s):
// before they asked for an epoch over the same members, every node gave up
// the run there. They ask as soon as their exchange fails (the stalled node
// still answers its heartbeats; else 2 * dead_timeout_s later, still 4 s
// before it comes back): the view they asked for has ended its operations of
// the old epoch by then, so it meets them at once.
TEST_P(StallProcessTest, TheOthersReformWithTheStalledMemberAndAllEndWithOneModel) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const StallVariant& v = GetParam();
  const auto start = std::chrono::steady_clock::now();
  StalledCluster c(v.config, "stall-" + v.name, v.stalled, "8:14");
  const auto outputs = [&] { return c.Outputs(); };
  const std::vector<nlohmann::json> s = testing::Summaries(c.nodes, c.run, outputs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  testing::ExpectOneTrainedModel(s, outputs());
  int asked = 0;  // requests, over the four
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].is_object()) continue;
    EXPECT_GE(s[i]["reforms"].get<int>(), 1) << "node" << i << ": " << s[i].dump();
    EXPECT_EQ(s[i]["world_size"], 4) << "node" << i;
    asked += s[i]["reforms_asked"].get<int>();
    EXPECT_EQ(s[i]["reforms_asked"].get<int>() > 0,
              c.nodes[i]->Output().find("asking for an epoch over the same members") != std::string::npos);
    EXPECT_EQ(s[i]["hung_members_declared"], 0) << "node" << i;
  }
  EXPECT_NE(c.nodes[static_cast<size_t>(v.stalled)]->Output().find("the training thread stalls"), std::string::npos)
      << outputs();
  EXPECT_GE(asked, 1) << outputs();
  std::printf("%s: node%d stalled 14 s; %d request(s) for an epoch over the same members; all four ended with "
              "one model in %.1f s\n", v.name.c_str(), v.stalled, asked, seconds);
}

INSTANTIATE_TEST_SUITE_P(Exchanges, StallProcessTest,
                         ::testing::Values(StallVariant{"ring", "allreduce-ring.toml", 0},
                                           StallVariant{"dpsgd", "gossip-dpsgd-ring.toml", 2},
                                           StallVariant{"diloco", "diloco.toml", 1}),
                         [](const ::testing::TestParamInfo<StallVariant>& info) { return info.param.name; });

// The coordinator's training hangs for longer than the others' re-form may
// wait (30 s; their exchange fails 2 s in, fabric.op_timeout_s, they ask for
// the re-form 2 * cluster.dead_timeout_s = 4 s later, and its deadline is
// 2 * fabric.op_timeout_s + 2 * cluster.dead_timeout_s + 10 = 18 s after
// that: 24 s in all) while its control thread answers: the
// three meet at the re-form's barrier without it, declare it dead, and the
// next epoch, proposed by node1, drops it. They train on to one model. node0,
// once it runs again, finds itself removed and rejoins by itself: admitted
// while the three train, or refused once they have ended the run (exit 0,
// without a model), or, when the three have exited already, it finds nobody
// by its cluster.join_timeout_s (5 s here) and exits 1 saying so.
TEST(HangProcessTest, AMemberWhoseTrainingHangsPastTheReformIsDroppedAndTheOthersTrainOn) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  StalledCluster c("allreduce-ring.toml", "hang", 0, "8:30", {"cluster.join_timeout_s=5"},
                   {"fabric.op_timeout_s=2", "cluster.suspect_timeout_s=1", "cluster.dead_timeout_s=2"});
  const auto outputs = [&] { return c.Outputs(); };
  std::vector<nlohmann::json> s;
  for (int i = 1; i < 4; ++i) {
    const std::optional<int> status = c.nodes[static_cast<size_t>(i)]->Wait(300);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i << "\n" << outputs();
    s.push_back(testing::ReadJson(c.run / ("node" + std::to_string(i)) / "summary.json"));
    ASSERT_TRUE(s.back().is_object()) << "node" << i << " wrote no summary\n" << outputs();
  }
  testing::ExpectOneTrainedModel(s, outputs());
  const int status = testing::ExitStatus(*c.nodes[0], 120);
  const bool nobody_left = c.nodes[0]->Output().find("not a cluster member by the deadline") != std::string::npos;
  EXPECT_TRUE(status == 0 || (status == 1 && nobody_left)) << "node0 exited " << status << "\n" << outputs();
  int declared = 0;
  for (int i = 1; i < 4; ++i) {
    const int counted = s[static_cast<size_t>(i - 1)]["hung_members_declared"].get<int>();
    EXPECT_EQ(counted > 0,
              c.nodes[static_cast<size_t>(i)]->Output().find("did not meet the re-form") != std::string::npos);
    declared += counted;
  }
  EXPECT_GE(declared, 2) << outputs();
  EXPECT_NE(c.nodes[0]->Output().find("rejoining the cluster"), std::string::npos) << outputs();
  std::printf("node0's training hung 30 s: %d of the three declared it dead at the re-form; the three ended with "
              "one model (world size %d at the end); node0 rejoined and exited %d%s\n", declared,
              s[0]["world_size"].get<int>(), status, nobody_left ? " (the three had ended)" : "");
}

// Of two members, the one that waited drops a hung coordinator by itself:
// node0's training hangs 30 s while its control thread answers; node1's
// all-reduce fails 2 s in, it asks for the re-form at once, meets it alone,
// declares node0 dead at the re-form's deadline (2 * 2 + 2 * 2 + 10 = 18 s),
// coordinates the epoch without it, and trains to the end alone. node0 then
// finds itself removed and tries to rejoin.
TEST(HangProcessTest, OfTwoMembersTheOtherDropsAHungCoordinatorAndTrainsOn) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  StalledCluster c("allreduce-ring.toml", "hang-two", 0, "8:30", {"cluster.join_timeout_s=5"},
                   {"fabric.op_timeout_s=2", "cluster.suspect_timeout_s=1", "cluster.dead_timeout_s=2"}, 2);
  const auto outputs = [&] { return c.Outputs(); };
  const std::optional<int> status = c.nodes[1]->Wait(300);
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << outputs();
  const nlohmann::json s = testing::ReadJson(c.run / "node1" / "summary.json");
  ASSERT_TRUE(s.is_object()) << "node1 wrote no summary\n" << outputs();
  EXPECT_EQ(s["world_size"], 1) << s.dump();
  EXPECT_GE(s["hung_members_declared"].get<int>(), 1) << s.dump();
  EXPECT_GT(s["steps"].get<int>(), 100) << s.dump();
  EXPECT_NE(c.nodes[1]->Output().find("did not meet the re-form"), std::string::npos) << outputs();
  const int node0 = testing::ExitStatus(*c.nodes[0], 120);
  const bool nobody_left = c.nodes[0]->Output().find("not a cluster member by the deadline") != std::string::npos;
  EXPECT_TRUE(node0 == 0 || (node0 == 1 && nobody_left)) << "node0 exited " << node0 << "\n" << outputs();
  EXPECT_NE(c.nodes[0]->Output().find("rejoining the cluster"), std::string::npos) << outputs();
}

}  // namespace
}  // namespace chorus::node
