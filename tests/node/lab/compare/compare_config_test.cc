// Tests of node/compare_config: the [compare] table of comparison files, and
// that every file in configs/compare/ names only methods that exist.
#include "node/lab/compare/compare_config.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "node/config/config_parse.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

using TempDir = chorus::testing::TempDir;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string ErrorOf(const Result<CompareConfig>& r) { return r ? "(no error)" : r.error().message(); }

TEST(CompareConfigTest, EveryComparisonFileParses) {
  const std::filesystem::path root = std::filesystem::path(CHORUS_SOURCE_DIR) / "configs" / "compare";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    Result<CompareConfig> config = ParseCompareFile(entry.path().string());
    ASSERT_TRUE(config) << ErrorOf(config);
    EXPECT_FALSE(config->methods.empty());
    // The same file is a valid node config too (nodes skip [compare]).
    EXPECT_TRUE(ParseConfigFile(entry.path().string()));
  }
  EXPECT_GE(files, 3);
}

TEST(CompareConfigTest, DefaultsToTheTenMethodMatrix) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "c.toml", "[train]\nepochs = 1\n"));
  ASSERT_TRUE(config) << ErrorOf(config);
  ASSERT_EQ(config->methods.size(), 10u);
  EXPECT_EQ(config->methods[0].name, "allreduce");
  EXPECT_EQ(config->methods[4].name, "dpsgd-qgm-mean-norm-one-peer-exp");
  EXPECT_EQ(config->methods[4].family, "gossip");
  EXPECT_EQ(config->methods[7].name, "local-sgd");
  EXPECT_EQ(config->methods[8].name, "diloco");
  EXPECT_EQ(config->methods[9].name, "noloco");
  EXPECT_EQ(config->methods[8].family, "low-communication");
  EXPECT_EQ(config->nodes, 4);
  EXPECT_DOUBLE_EQ(config->target_accuracy, 0.85);
  EXPECT_FALSE(config->link.enabled);
}

TEST(CompareConfigTest, ReadsLinkAndCustomMethods) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "c.toml", R"(
[compare]
name = "mine"
nodes = 8
methods = ["dpsgd-ring", "choco-int8"]
link = { bandwidth = "1gbit", latency = "1ms" }

[[compare.method]]
name = "choco-int8"
label = "CHOCO int8"
set = ["exchange.kind=gossip", "exchange.protocol=choco", "exchange.compression.codec=int8"]
)"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->name, "mine");
  EXPECT_EQ(config->nodes, 8);
  ASSERT_EQ(config->methods.size(), 2u);
  EXPECT_EQ(config->methods[1].label, "CHOCO int8");
  EXPECT_EQ(config->methods[1].overrides.size(), 3u);
  EXPECT_TRUE(config->link.enabled);
  EXPECT_DOUBLE_EQ(config->link.bytes_per_s, 1e9 / 8);  // 1 gbit = 1e9 bits/s (tc units, SI)
  EXPECT_DOUBLE_EQ(config->link.latency_s, 1e-3);
}

TEST(CompareConfigTest, ErrorsNameFileLineAndKey) {
  TempDir dir;
  const std::string path = Write(dir, "bad.toml", R"([compare]
nodes = 0
methods = ["ring-allreduce", "no-such-method"]
link = { bandwidth = "fast" }
colour = "blue"
)");
  Result<CompareConfig> config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  const std::string m = config.error().message();
  EXPECT_NE(m.find(path + ":2:9: compare.nodes: expected an integer in 1..64"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown method \"no-such-method\""), std::string::npos) << m;
  EXPECT_NE(m.find("compare.link.bandwidth"), std::string::npos) << m;
  EXPECT_NE(m.find(":5:10: compare.colour: unknown key"), std::string::npos) << m;
}

TEST(CompareConfigTest, ReadsALateJoiner) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "late.toml", R"([compare]
nodes = 4
methods = ["ring-allreduce"]
late_joiner = { node = 3, after_s = 2.5 }
)"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->late_node, 3);
  EXPECT_DOUBLE_EQ(config->late_after_s, 2.5);
  EXPECT_EQ(config->slow_node, -1);

  // Integer seconds are seconds too; no table: no late joiner.
  config = ParseCompareFile(Write(dir, "int.toml", "[compare]\nlate_joiner = { node = 1, after_s = 0 }\n"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->late_node, 1);
  EXPECT_DOUBLE_EQ(config->late_after_s, 0.0);
  config = ParseCompareFile(Write(dir, "none.toml", "[compare]\nnodes = 2\n"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->late_node, -1);
}

TEST(CompareConfigTest, LateJoinerErrorsNameLineAndKey) {
  TempDir dir;
  // node0 holds the bootstrap port; seconds are not negative; no other keys.
  std::string path = Write(dir, "bad.toml", R"([compare]
late_joiner = { node = 0, after_s = -1.0, when = 3 }
)");
  Result<CompareConfig> config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  std::string m = config.error().message();
  EXPECT_NE(m.find(path + ":2:24: compare.late_joiner.node: expected a node index >= 1"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":2:37: compare.late_joiner.after_s: expected seconds >= 0"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":2:50: compare.late_joiner.when: unknown key"), std::string::npos) << m;

  path = Write(dir, "shape.toml", "[compare]\nlate_joiner = 3\n");
  config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  m = config.error().message();
  EXPECT_NE(m.find(path + ":2:15: compare.late_joiner: expected a table"), std::string::npos) << m;

  // Past the nodes.
  path = Write(dir, "past.toml", "[compare]\nnodes = 3\nlate_joiner = { node = 3, after_s = 1.0 }\n");
  config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  m = config.error().message();
  EXPECT_NE(m.find("compare.late_joiner.node: 3 is not below compare.nodes = 3"), std::string::npos) << m;
}

TEST(CompareConfigTest, ReadsSpeedAndBatchProfiles) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "hetero.toml", R"([compare]
nodes = 4
methods = ["ring-allreduce"]
speeds = [1, 1.0, 0.5, 0.25]
batch_sizes = [32, 64, 64, 128]
)"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->speeds, (std::vector<double>{1.0, 1.0, 0.5, 0.25}));
  EXPECT_EQ(config->batch_sizes, (std::vector<int>{32, 64, 64, 128}));
  EXPECT_EQ(config->slow_node, -1);
  EXPECT_EQ(CompareGlobalBatch(*config, 64), 32 + 64 + 64 + 128);
  // Full-speed nodes get no slowdown; speed 0.5 sleeps 1x its compute, 0.25 3x.
  const std::vector<std::pair<int, std::string>> expected = {
      {2, "train.slowdown=1"},         {3, "train.slowdown=3"},          {0, "train.batch_size=32"},
      {1, "train.batch_size=64"},      {2, "train.batch_size=64"},       {3, "train.batch_size=128"}};
  EXPECT_EQ(ProfileNodeSettings(*config), expected);

  // No profiles: every node the same, global batch = batch x nodes.
  config = ParseCompareFile(Write(dir, "plain.toml", "[compare]\nnodes = 3\n"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_TRUE(config->speeds.empty());
  EXPECT_TRUE(config->batch_sizes.empty());
  EXPECT_TRUE(ProfileNodeSettings(*config).empty());
  EXPECT_EQ(CompareGlobalBatch(*config, 64), 3 * 64);
}

TEST(CompareConfigTest, StragglerIsOneSlowNodesSetting) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "s.toml", R"([compare]
nodes = 2
straggler = { node = 1, slowdown = 2.0 }
batch_sizes = [16, 48]
)"));
  ASSERT_TRUE(config) << ErrorOf(config);
  const std::vector<std::pair<int, std::string>> expected = {
      {1, "train.slowdown=2"}, {0, "train.batch_size=16"}, {1, "train.batch_size=48"}};
  EXPECT_EQ(ProfileNodeSettings(*config), expected);
}

TEST(CompareConfigTest, ProfileErrorsNameFileLineAndKey) {
  TempDir dir;
  // Lengths are checked against nodes wherever `nodes` stands in the table.
  std::string path = Write(dir, "length.toml", R"([compare]
speeds = [1, 0.5]
batch_sizes = [32, 64, 64]
nodes = 4
)");
  Result<CompareConfig> config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  std::string m = config.error().message();
  EXPECT_NE(m.find(path + ":2:10: compare.speeds: lists 2 nodes, compare.nodes is 4"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":3:15: compare.batch_sizes: lists 3 nodes, compare.nodes is 4"), std::string::npos)
      << m;

  // Entries out of range or of the wrong kind, each at its place.
  path = Write(dir, "values.toml", R"([compare]
nodes = 3
speeds = [1, 0, 1.5]
batch_sizes = [32, 0.5, "64"]
)");
  config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  m = config.error().message();
  EXPECT_NE(m.find(path + ":3:14: compare.speeds: expected a speed in (0, 1]"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":3:17: compare.speeds: expected a speed in (0, 1]"), std::string::npos) << m;
  EXPECT_EQ(m.find(path + ":3:11:"), std::string::npos) << m;  // 1 is a full node
  EXPECT_NE(m.find(path + ":4:20: compare.batch_sizes: expected a batch size, an integer >= 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find(path + ":4:25: compare.batch_sizes: expected a batch size"), std::string::npos) << m;
  // Three entries as written, for three nodes: the wrong ones are not also a wrong length.
  EXPECT_EQ(m.find("lists"), std::string::npos) << m;

  // Not a list, or an empty one.
  path = Write(dir, "shape.toml", "[compare]\nspeeds = 0.5\nbatch_sizes = []\n");
  config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  m = config.error().message();
  EXPECT_NE(m.find(path + ":2:10: compare.speeds: expected a list with one entry per node"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":3:15: compare.batch_sizes: expected a list with one entry per node"), std::string::npos)
      << m;

  // A straggler and speeds say the same thing twice.
  path = Write(dir, "both.toml", R"([compare]
nodes = 2
straggler = { node = 1, slowdown = 2.0 }
speeds = [1, 0.5]
)");
  config = ParseCompareFile(path);
  ASSERT_FALSE(config);
  m = config.error().message();
  EXPECT_NE(m.find(path + ":4:10: compare.speeds: give either straggler or speeds, not both"), std::string::npos)
      << m;
}

TEST(CompareConfigTest, RejectsDuplicateMethods) {
  TempDir dir;
  Result<CompareConfig> config =
      ParseCompareFile(Write(dir, "d.toml", "[compare]\nmethods = [\"dpsgd-ring\", \"dpsgd-ring\"]\n"));
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message().find("listed twice"), std::string::npos);
}

TEST(CompareConfigTest, EveryBuiltinMethodIsAValidNodeConfig) {
  for (const CompareMethod& m : BuiltinMethods()) {
    SCOPED_TRACE(m.name);
    Config config = DefaultConfig();
    config.cluster.min_nodes = 4;
    for (const std::string& o : m.overrides) ASSERT_TRUE(ApplyOverride(&config, o, "test").ok()) << o;
    EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).message();
  }
}

TEST(CompareConfigTest, SitesGroupTheNodesWithALinkBetweenThem) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "sites.toml", R"([compare]
nodes = 6
link = { bandwidth = "10gbit", latency = "0.1ms" }
sites = [[0, 2, 4], [1, 3, 5]]
site_link = "100mbit 50ms"
)"));
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(SiteOfNode(*config), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(config->site_link.bytes_per_s, 100e6 / 8);
  EXPECT_DOUBLE_EQ(config->site_link.latency_s, 0.05);
  EXPECT_TRUE(SiteOfNode(CompareConfig{}).empty());
}

TEST(CompareConfigTest, SitesThatDoNotCoverTheNodesOnceAreNamed) {
  TempDir dir;
  const std::string path = Write(dir, "bad-sites.toml", R"([compare]
sites = [[0, 1, 1], [5]]
site_link = "fast 50ms"
nodes = 4
)");
  const std::string m = ErrorOf(ParseCompareFile(path));
  EXPECT_NE(m.find(path + ":2:9: compare.sites: node 5 is not below compare.nodes = 4"), std::string::npos) << m;
  EXPECT_NE(m.find("compare.sites: node 1 is in 2 sites (every node in exactly one)"), std::string::npos) << m;
  EXPECT_NE(m.find("compare.sites: node 2 is in no site"), std::string::npos) << m;
  EXPECT_NE(m.find("compare.sites: needs link = {"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ":3:13: compare.site_link:"), std::string::npos) << m;
  const std::string one = ErrorOf(ParseCompareFile(Write(dir, "one-site.toml", R"([compare]
nodes = 2
link = { bandwidth = "1gbit" }
sites = [[0, 1]]
)")));
  EXPECT_NE(one.find("compare.sites: needs two sites or more"), std::string::npos) << one;
  EXPECT_NE(one.find("compare.sites: needs site_link"), std::string::npos) << one;
}

}  // namespace
}  // namespace chorus::node
