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

TEST(CompareConfigTest, DefaultsToTheSevenMethodMatrix) {
  TempDir dir;
  Result<CompareConfig> config = ParseCompareFile(Write(dir, "c.toml", "[train]\nepochs = 1\n"));
  ASSERT_TRUE(config) << ErrorOf(config);
  ASSERT_EQ(config->methods.size(), 7u);
  EXPECT_EQ(config->methods[0].name, "ring-allreduce");
  EXPECT_EQ(config->methods[6].name, "local-sgd");
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

}  // namespace
}  // namespace chorus::node
