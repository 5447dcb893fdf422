// End-to-end `chorus compare`: a tiny comparison (2 methods x 2 node processes,
// a fraction of an epoch, configs/compare/tiny.toml) produces compare.json, each
// method's node folders, and a report with the table; a failing method is
// recorded and makes compare exit non-zero while the others still run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::ReadJson;

using testing::kDataDir;

struct CompareRun {
  int exit_status = -1;
  std::string output;
  fs::path dir;
};

CompareRun RunTinyCompare(const std::string& tag, const std::vector<std::string>& extra) {
  const fs::path out = fs::temp_directory_path() / ("chorus-compare-test-" + std::to_string(getpid()) + tag);
  fs::remove_all(out);
  std::vector<std::string> args = {"compare", std::string(CHORUS_SOURCE_DIR) + "/configs/compare/tiny.toml",
                                   "--set", "run.output_dir=\"" + out.string() + "\"",
                                   "--set", "cluster.token=\"compare-test-" + tag + "\"",
                                   "--set", "cluster.join_timeout_s=20"};
  args.insert(args.end(), extra.begin(), extra.end());
  ChorusProcess compare(args);
  CompareRun run;
  std::optional<int> status = compare.Wait(240);
  run.exit_status = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  run.output = compare.Output();
  run.dir = out / "compare-tiny";
  return run;
}

// Writes `toml` to a fresh temporary folder as `file_name` and runs `chorus
// compare` on it, its runs in that folder; `dir` is the folder.
CompareRun RunCompareFile(const std::string& tag, const std::string& file_name, const std::string& toml,
                          const std::vector<std::string>& extra, double timeout_s = 240) {
  CompareRun run;
  run.dir = fs::temp_directory_path() / ("chorus-compare-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(run.dir);
  fs::create_directories(run.dir);
  const fs::path file = run.dir / file_name;
  std::ofstream(file) << toml;
  std::vector<std::string> args = {"compare", file.string(), "--set", "run.output_dir=\"" + run.dir.string() + "\""};
  args.insert(args.end(), extra.begin(), extra.end());
  ChorusProcess compare(args);
  std::optional<int> status = compare.Wait(timeout_s);
  run.exit_status = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  run.output = compare.Output();
  return run;
}

TEST(CompareProcessTest, TinyComparisonWritesReportAndTable) {
  if (!fs::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  }
  CompareRun run = RunTinyCompare("ok", {});
  ASSERT_EQ(run.exit_status, 0) << run.output;
  nlohmann::json compare = ReadJson(run.dir / "compare.json");
  ASSERT_TRUE(compare.is_object()) << run.output;
  EXPECT_EQ(compare["nodes"], 2);
  ASSERT_EQ(compare["methods"].size(), 2u);
  for (const auto& m : compare["methods"]) {
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m["exit_code"], 0);
    for (int i = 0; i < 2; ++i) {
      const fs::path node = run.dir / m["dir"].get<std::string>() / ("node" + std::to_string(i));
      nlohmann::json summary = ReadJson(node / "summary.json");
      ASSERT_TRUE(summary.is_object()) << node;
      EXPECT_EQ(summary["world_size"], 2);
      // Intermediate evaluations ran (eval_every_steps = 10 in tiny.toml).
      std::ifstream metrics(node / "metrics.jsonl");
      int evals = 0;
      for (std::string line; std::getline(metrics, line);) {
        nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
        if (r.contains("eval_accuracy")) ++evals;
        if (r.contains("time") && r.contains("wall_time")) {
          EXPECT_LE(r["time"].get<double>(), r["wall_time"].get<double>());
        }
      }
      EXPECT_GE(evals, 3) << node;
    }
  }
  EXPECT_GT(compare["single_node"]["samples_per_s"].get<double>(), 0.0);
  EXPECT_TRUE(fs::exists(run.dir / "report.html"));
  EXPECT_TRUE(fs::exists(run.dir / "report" / "table.csv"));
  // The table is printed with both methods and the report's path.
  EXPECT_NE(run.output.find("all-reduce (auto)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("D-PSGD ring"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("report: "), std::string::npos) << run.output;
  fs::remove_all(run.dir.parent_path());
}

TEST(CompareProcessTest, AFailingMethodIsRecordedAndTheRestStillRun) {
  if (!fs::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  }
  // "broken" passes validation but its nodes cannot find their data at start.
  const CompareRun run = RunCompareFile("fail", "fail.toml", R"([compare]
name = "fail"
nodes = 2
single_node_baseline = false
methods = ["broken", "ring-allreduce"]

[[compare.method]]
name = "broken"
family = "allreduce"
set = ["exchange.kind=allreduce", "data.dir=\"/nonexistent/fashion-mnist\""]

[run]
progress = "off"
[train]
epochs = 1
batch_size = 32
threads = 1
[data]
train_limit = 640
test_limit = 200
[cluster]
token = "compare-fail"
join_timeout_s = 20.0
)",
                                        {});
  const fs::path& dir = run.dir;
  ASSERT_GE(run.exit_status, 0) << run.output;
  EXPECT_EQ(run.exit_status, 1) << run.output;
  nlohmann::json result = ReadJson(dir / "fail" / "compare.json");
  ASSERT_TRUE(result.is_object()) << run.output;
  ASSERT_EQ(result["methods"].size(), 2u);
  EXPECT_NE(result["methods"][0]["exit_code"], 0);
  EXPECT_EQ(result["methods"][1]["exit_code"], 0);
  EXPECT_NE(run.output.find("FAILED"), std::string::npos) << run.output;
  // The nodes' own error is in the method's launch.log.
  std::ifstream log(dir / "fail" / "broken" / "launch.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("/nonexistent/fashion-mnist"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(dir / "fail" / "report.html"));
  fs::remove_all(dir);
}

// A late joiner: node2 of 3 starts 1 s after the others in every method's
// launch; the other two form the cluster (cluster.min_nodes = 2, not 3, or
// they would wait for it) and node2 joins them while they train. The run is
// long enough that node2 is admitted before the end: 3 epochs of 12000 images
// with each step's compute slept 4 times over (train.slowdown; a third of the
// CPU of the 4 epochs of 30000 images this took before) train for about 6 s
// on a 2-core machine (unslowed: under 2 s, and node2 would find the cluster
// gone), with an admission point every 10 steps.
TEST(CompareProcessTest, ALateJoinerJoinsEveryMethodAndIsRecorded) {
  if (!fs::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  }
  const CompareRun run = RunCompareFile("late", "late.toml", R"([compare]
name = "late"
nodes = 3
single_node_baseline = false
methods = ["ring-allreduce", "dpsgd-ring"]
late_joiner = { node = 2, after_s = 1.0 }

[run]
progress = "off"
[train]
epochs = 3
batch_size = 32
threads = 1
slowdown = 4.0
[data]
train_limit = 12000
test_limit = 500
[cluster]
token = "compare-late"
join_timeout_s = 20.0
admit_every_steps = 10
admit_every_s = 0
)", {"--no-report"});
  const fs::path& dir = run.dir;
  ASSERT_GE(run.exit_status, 0) << run.output;
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_NE(run.output.find("on 3 nodes, node2 joining after 1 s"), std::string::npos) << run.output;
  nlohmann::json result = ReadJson(dir / "late" / "compare.json");
  ASSERT_TRUE(result.is_object()) << run.output;
  EXPECT_EQ(result["late_joiner"], (nlohmann::json{{"node", 2}, {"after_s", 1.0}})) << result.dump();
  ASSERT_EQ(result["methods"].size(), 2u);
  for (const auto& m : result["methods"]) {
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m["exit_code"], 0);
    const fs::path method = dir / "late" / m["dir"].get<std::string>();
    const nlohmann::json joiner = ReadJson(method / "node2" / "summary.json");
    ASSERT_TRUE(joiner.is_object());
    // node2 trained beside the two: admitted mid-run, not after they ended.
    EXPECT_EQ(joiner["world_size"], 3) << joiner.dump();
    EXPECT_GT(joiner["steps"].get<int>(), 0) << joiner.dump();
    std::ifstream log(method / "launch.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("launch: all 2 on-time nodes are in epoch 0"), std::string::npos) << text;
    EXPECT_NE(text.find("launch: started node2"), std::string::npos) << text;
  }
  fs::remove_all(dir);
}

// Node profiles: node0 trains batch 16 at full speed, node1 batch 48 at half
// speed; each node process gets its own settings, and compare.json and the
// progress line say so.
TEST(CompareProcessTest, NodeProfilesReachEachNodeAndAreRecorded) {
  if (!fs::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (" << kDataDir << ")";
  }
  const CompareRun run = RunCompareFile("profiles", "profiles.toml", R"([compare]
name = "profiles"
nodes = 2
single_node_baseline = false
methods = ["ring-allreduce"]
speeds = [1, 0.5]
batch_sizes = [16, 48]

[run]
progress = "off"
[train]
epochs = 1
batch_size = 32
threads = 1
[data]
train_limit = 1280
test_limit = 200
[cluster]
token = "compare-profiles"
join_timeout_s = 20.0
)", {"--no-report"});
  const fs::path& dir = run.dir;
  const fs::path file = dir / "profiles.toml";
  ASSERT_GE(run.exit_status, 0) << run.output;
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_NE(run.output.find("on 2 nodes, speeds 1/0.5, batches 16/48"), std::string::npos) << run.output;
  nlohmann::json result = ReadJson(dir / "profiles" / "compare.json");
  ASSERT_TRUE(result.is_object()) << run.output;
  EXPECT_EQ(result["node_profiles"], (nlohmann::json{{"speeds", {1.0, 0.5}}, {"batch_sizes", {16, 48}}}))
      << result.dump();
  EXPECT_EQ(result["global_batch"], 64);
  EXPECT_TRUE(result["straggler"].is_null());
  const std::vector<int> batches = {16, 48};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    nlohmann::json summary = ReadJson(dir / "profiles" / "ring-allreduce" / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << run.output;
    EXPECT_EQ(summary["batch_size"], batches[static_cast<size_t>(i)]);
    EXPECT_EQ(summary["global_batch"], 64);
  }
  fs::remove_all(dir);
}

TEST(CompareProcessTest, BadFileFailsBeforeRunningAnything) {
  const CompareRun run = RunCompareFile("bad", "bad.toml", "[compare]\nmethods = [\"ring-allreduce\", \"nope\"]\n", {}, 60);
  const fs::path& dir = run.dir;
  ASSERT_GE(run.exit_status, 0) << run.output;
  EXPECT_EQ(run.exit_status, 2) << run.output;
  EXPECT_NE(run.output.find("unknown method \"nope\""), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir / "compare" / "compare.json"));
  fs::remove_all(dir);
}

TEST(CompareProcessTest, NodesThatDoNotMatchTheProfilesFailBeforeRunningAnything) {
  const CompareRun run = RunCompareFile("nodes", "two.toml", "[compare]\nnodes = 2\nmethods = [\"ring-allreduce\"]\nbatch_sizes = [16, 32]\n", {"--nodes", "3"}, 60);
  const fs::path& dir = run.dir;
  const fs::path file = dir / "two.toml";
  ASSERT_GE(run.exit_status, 0) << run.output;
  EXPECT_EQ(run.exit_status, 2) << run.output;
  EXPECT_NE(run.output.find("--nodes 3 but compare.batch_sizes in " + file.string() + " lists 2 nodes"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(dir / "compare" / "compare.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chorus::node
