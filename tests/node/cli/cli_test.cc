// Tests of the `chorus` command line, run as a separate process: help and
// version, `config check` (good file, bad file, --set), and `node` rejecting a
// bad configuration before it starts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "node/config/config_parse.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the chorus binary with `args` (shell syntax) in a clean environment for
// rank hints, so that a CI job under Slurm does not change the resolved config.
Outcome RunChorus(const std::string& args) {
  const std::string command = "env -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_RANK "
                              "-u OMPI_COMM_WORLD_SIZE " CHORUS_BINARY " " + args + " 2>&1";
  Outcome outcome;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) outcome.output.append(buffer, n);
  const int status = ::pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/chorus_cli_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

const std::string kSingleMlp = std::string(CHORUS_SOURCE_DIR) + "/configs/single-mlp.toml";

TEST(CliTest, VersionAndHelp) {
  Outcome version = RunChorus("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.output, HasSubstr(CHORUS_VERSION));

  Outcome help = RunChorus("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("node"));
  EXPECT_THAT(help.output, HasSubstr("config"));

  Outcome node_help = RunChorus("node --help");
  EXPECT_EQ(node_help.exit_code, 0);
  for (const char* option : {"--resume", "--run", "--output", "--epochs", "--threads", "--log-level", "--set"}) {
    EXPECT_THAT(node_help.output, HasSubstr(option));
  }
}

TEST(CliTest, UsageErrorsExitWithTwo) {
  EXPECT_EQ(RunChorus("").exit_code, 2);
  EXPECT_EQ(RunChorus("no-such-command").exit_code, 2);
  EXPECT_EQ(RunChorus("config check").exit_code, 2);
}

// A configuration error stops a launch before any node starts: exit 2, the
// error once, naming its file or key (also one node's own --node-set).
TEST(CliTest, LaunchChecksTheConfigurationBeforeStartingNodes) {
  const Outcome missing = RunChorus("launch -n 2 /nonexistent/nope.toml");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/nope.toml"));
  EXPECT_THAT(missing.output, ::testing::Not(HasSubstr("[node0]")));
  EXPECT_THAT(missing.output, ::testing::Not(HasSubstr("launch: launch:")));
  const Outcome typo = RunChorus("launch -n 2 " + kSingleMlp + " --set train.epochz=1");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_THAT(typo.output, HasSubstr("epochz"));
  const Outcome own = RunChorus("launch -n 3 " + kSingleMlp + " --node-set 2:train.batch_size=0");
  EXPECT_EQ(own.exit_code, 2) << own.output;
  EXPECT_THAT(own.output, HasSubstr("train.batch_size"));
}

TEST(CliTest, ChaosChecksTheConfigurationBeforeStartingNodes) {
  const Outcome missing = RunChorus("chaos /nonexistent/nope.toml --out " + ::testing::TempDir() + "/chaos-nope");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/nope.toml"));
  EXPECT_THAT(missing.output, ::testing::Not(HasSubstr("fault-free run")));
}

TEST(CliTest, CompareSaysWhyItCannotReadItsFile) {
  const Outcome missing = RunChorus("compare /nonexistent/nope.toml");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/nope.toml: cannot read comparison file"));
  EXPECT_THAT(missing.output, ::testing::Not(HasSubstr(":0:0")));
}

TEST(CliTest, AnUnknownCommandIsNamedWithTheClosestOne) {
  const Outcome typo = RunChorus("nod configs/single-mlp.toml");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.output, HasSubstr("unknown command 'nod'; did you mean 'node'?"));
  const Outcome far = RunChorus("xyzzyq");
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_THAT(far.output, HasSubstr("unknown command 'xyzzyq'"));
  EXPECT_THAT(far.output, ::testing::Not(HasSubstr("did you mean")));
  EXPECT_THAT(RunChorus("comapre x.toml").output, HasSubstr("did you mean 'compare'?"));
}

TEST(CliTest, ConfigCheckPrintsSettingsThatReparse) {
  Outcome check = RunChorus("config check " + kSingleMlp);
  ASSERT_EQ(check.exit_code, 0) << check.output;
  Result<Config> printed = ParseConfigString(check.output, "printed");
  ASSERT_TRUE(printed) << printed.error().message() << "\n" << check.output;
  Result<Config> original = ParseConfigFile(kSingleMlp);
  ASSERT_TRUE(original);
  EXPECT_TRUE(printed->SameSettings(*original));
}

TEST(CliTest, ConfigCheckAppliesSetOverrides) {
  Outcome check = RunChorus("config check " + kSingleMlp + " --set train.batch_size=128 --set run.name=trial");
  ASSERT_EQ(check.exit_code, 0) << check.output;
  Result<Config> printed = ParseConfigString(check.output, "printed");
  ASSERT_TRUE(printed) << check.output;
  EXPECT_EQ(printed->train.batch_size, 128);
  EXPECT_EQ(printed->run.name, "trial");
}

TEST(CliTest, ConfigCheckRejectsABadFileWithItsLine) {
  const std::string path = TempFile("bad.toml", "[train]\nbatch_size = 0\n");
  Outcome check = RunChorus("config check " + path);
  EXPECT_EQ(check.exit_code, 2);
  EXPECT_THAT(check.output, HasSubstr(path + ":2:1: train.batch_size: expected an integer >= 1, got 0"));
  std::filesystem::remove(path);

  Outcome missing = RunChorus("config check /nonexistent/x.toml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/x.toml"));
}

// What a node would refuse only at start, config check refuses too: a data
// folder without the data set, and a comparison file's bad [compare] key.
TEST(CliTest, ConfigCheckLooksAtTheDataAndTheCompareTable) {
  const Outcome no_data = RunChorus("config check " + kSingleMlp + " --set data.dir=\\\"/nonexistent\\\"");
  EXPECT_EQ(no_data.exit_code, 2) << no_data.output;
  EXPECT_THAT(no_data.output, HasSubstr("data.dir: no train-images-idx3-ubyte.gz in /nonexistent"));

  const std::string compare = TempFile("compare.toml", "[train]\nepochs = 1\n\n[compare]\nmethodz = [\"ring-allreduce\"]\n");
  const Outcome bad_compare = RunChorus("config check " + compare);
  EXPECT_EQ(bad_compare.exit_code, 2) << bad_compare.output;
  EXPECT_THAT(bad_compare.output, HasSubstr("methodz"));
  std::filesystem::remove(compare);
  const Outcome good_compare = RunChorus("config check " + std::string(CHORUS_SOURCE_DIR) + "/configs/compare/default.toml");
  EXPECT_EQ(good_compare.exit_code, 0) << good_compare.output;
}

TEST(CliTest, NodeRejectsBadOverridesBeforeStarting) {
  Outcome bad_set = RunChorus("node " + kSingleMlp + " --set train.batch_size=0");
  EXPECT_EQ(bad_set.exit_code, 2);
  EXPECT_THAT(bad_set.output,
              HasSubstr("--set train.batch_size=0: train.batch_size: expected an integer >= 1, got 0"));

  Outcome bad_epochs = RunChorus("node --epochs many");
  EXPECT_EQ(bad_epochs.exit_code, 2);
  EXPECT_THAT(bad_epochs.output, HasSubstr("--epochs: train.epochs: expected an integer, got \"many\""));

  Outcome bad_threads = RunChorus("node --threads 999");
  EXPECT_EQ(bad_threads.exit_code, 2);
  EXPECT_THAT(bad_threads.output, HasSubstr("--threads: train.threads: expected an integer in [1, 256], got 999"));

  Outcome bad_key = RunChorus("node --set train.batchsize=3");
  EXPECT_EQ(bad_key.exit_code, 2);
  EXPECT_THAT(bad_key.output, HasSubstr("did you mean train.batch_size?"));
}

// `chorus bench allreduce`, shortest run: two processes over tcp, one size,
// two algorithms. Every row is checked by the ranks (CHECK FAILED otherwise)
// and carries the nccl-tests columns plus p99, with p99 >= the median.
TEST(CliTest, BenchAllreduceRunsAndPrintsItsTable) {
  Outcome bench = RunChorus(
      "bench allreduce --ranks 2 --provider 'tcp;ofi_rxm' --min-size 4KiB --max-size 4KiB "
      "--algorithms ring,recursive-doubling --seconds 0.05 --warmup 0");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_THAT(bench.output, HasSubstr("busbw(GB/s)      p99(us)"));
  EXPECT_THAT(bench.output, ::testing::Not(HasSubstr("CHECK FAILED")));
  int rows = 0;
  std::istringstream lines(bench.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    if (f.size() != 9 || f[0] != "4096") continue;
    ++rows;
    EXPECT_TRUE(f[3] == "ring" || f[3] == "recursive-doubling") << line;
    EXPECT_GT(std::stod(f[5]), 0.0) << line;
    EXPECT_GE(std::stod(f[8]), std::stod(f[5])) << line;
  }
  EXPECT_EQ(rows, 4) << bench.output;  // 2 algorithms x float32, float16
}

// --config: `auto` picks by a node's [exchange.crossovers] (the header says
// what it picks per size); a file that does not parse is a usage error naming
// it and the key.
TEST(CliTest, BenchAllreduceTakesCrossoversFromANodesConfig) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("chorus-cli-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "good.toml") << "[exchange.crossovers]\nrecursive_doubling_max_kib = 0\n";
  std::ofstream(dir / "bad.toml") << "[exchange.crossovers]\ntree_max_kib = -7\n";
  const std::string common =
      " --ranks 2 --provider 'tcp;ofi_rxm' --min-size 4KiB --max-size 4KiB --algorithms auto --seconds 0.05 "
      "--warmup 0";
  Outcome plain = RunChorus("bench allreduce" + common);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("# auto picks: 4096 B recursive-doubling\n"));
  // No recursive doubling, and 4 KiB is below halving-doubling: the ring.
  Outcome good = RunChorus("bench allreduce --config " + (dir / "good.toml").string() + common);
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_THAT(good.output, HasSubstr("# auto picks: 4096 B ring\n"));
  EXPECT_THAT(good.output, ::testing::Not(HasSubstr("CHECK FAILED")));
  Outcome bad = RunChorus("bench allreduce --config " + (dir / "bad.toml").string() + common);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output,
              HasSubstr("bad.toml:2:1: exchange.crossovers.tree_max_kib: expected an integer >= -1, got -7"));
  Outcome missing = RunChorus("bench allreduce --config " + (dir / "missing.toml").string() + common);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("missing.toml"));
  std::filesystem::remove_all(dir);
}

// --fit-crossovers prints an [exchange.crossovers] table that a node's TOML
// takes as it is, and `auto` then picks what the fit said it would.
TEST(CliTest, BenchAllreduceFitsCrossoversANodeTakes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("chorus-cli-fit-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string common =
      " --ranks 2 --provider 'tcp;ofi_rxm' --min-size 4KiB --max-size 64KiB --seconds 0.05 --warmup 0";
  Outcome fit = RunChorus("bench allreduce --fit-crossovers" + common);
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const size_t table = fit.output.find("[exchange.crossovers]\n");
  ASSERT_NE(table, std::string::npos) << fit.output;
  const std::string picks_label = "# at 2 ranks it picks:";
  const size_t picks_at = fit.output.find(picks_label);
  ASSERT_NE(picks_at, std::string::npos) << fit.output;
  const size_t picks_begin = picks_at + picks_label.size();
  const std::string picks = fit.output.substr(picks_begin, fit.output.find('\n', picks_at) - picks_begin);
  std::ofstream(dir / "fitted.toml") << fit.output.substr(table);
  Outcome fitted = RunChorus("bench allreduce --algorithms auto --config " + (dir / "fitted.toml").string() + common);
  EXPECT_EQ(fitted.exit_code, 0) << fitted.output;
  EXPECT_THAT(fitted.output, HasSubstr("# auto picks:" + picks + "\n")) << fit.output;

  Outcome short_of_one = RunChorus("bench allreduce --fit-crossovers --algorithms ring,tree,halving-doubling" + common);
  EXPECT_EQ(short_of_one.exit_code, 2) << short_of_one.output;
  EXPECT_THAT(short_of_one.output, HasSubstr("--fit-crossovers needs recursive-doubling in --algorithms"));
  std::filesystem::remove_all(dir);
}

// --rounds: the algorithms alternate size by size, every round again, and the
// provider's table of medians has one line per size with auto against the best.
TEST(CliTest, BenchAllreduceRoundsAlternateAndEndWithMedians) {
  Outcome run = RunChorus(
      "bench allreduce --rounds 2 --ranks 2 --provider 'tcp;ofi_rxm' --algorithms ring,auto --min-size 4KiB "
      "--max-size 16KiB --seconds 0.02 --warmup 0");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("# round 2 of 2\n"));
  const size_t ring_4k = run.output.find("        4096          1024  float              ring");
  const size_t auto_4k = run.output.find("        4096          1024  float              auto");
  const size_t ring_16k = run.output.find("       16384          4096  float              ring");
  ASSERT_NE(ring_16k, std::string::npos) << run.output;
  EXPECT_LT(ring_4k, auto_4k) << run.output;  // size by size, the algorithms alternated
  EXPECT_LT(auto_4k, ring_16k) << run.output;
  EXPECT_THAT(run.output, HasSubstr("float32: median time (us) over 2 rounds per algorithm"));
  EXPECT_THAT(run.output, ::testing::ContainsRegex("\n +2 +4096 +[0-9.]+ +[0-9.]+   auto/best [0-9.]+\n"));
  EXPECT_THAT(run.output, ::testing::ContainsRegex("\n +2 +16384 +[0-9.]+ +[0-9.]+   auto/best [0-9.]+\n"));
}

}  // namespace
}  // namespace chorus::node
