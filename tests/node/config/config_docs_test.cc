// The docs read the config's one key table: docs/cli-and-configs.md's TOML
// reference is exactly what `chorus config check` prints for the built-in
// default (configs/single-mlp.toml spells it out) (every key, its default, and the values it accepts), so a key or a
// value added, renamed or removed in node/config fails here until the docs
// say so too.
#include <gtest/gtest.h>

#include <string>

#include "common/files.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"

namespace chorus::node {
namespace {

// The fenced ```toml block after `heading` in `text`.
std::string TomlBlockAfter(const std::string& text, const std::string& heading) {
  const size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  const std::string open = "```toml\n";
  const size_t begin = text.find(open, at);
  if (begin == std::string::npos) return "";
  const size_t end = text.find("```", begin + open.size());
  return end == std::string::npos ? "" : text.substr(begin + open.size(), end - begin - open.size());
}

TEST(ConfigDocsTest, TomlReferenceIsWhatConfigCheckPrintsForTheDefault) {
  const std::string path = std::string(CHORUS_SOURCE_DIR) + "/docs/cli-and-configs.md";
  Result<std::string> docs = ReadFileText(path);
  ASSERT_TRUE(docs) << docs.error().ToString();
  std::string expected = DescribeConfig(DefaultConfig());
  expected = expected.substr(expected.find("\n\n") + 2);  // after the "# Resolved settings of ..." line
  EXPECT_EQ(TomlBlockAfter(*docs, "## TOML reference"), expected)
      << path << ": the TOML reference differs from `chorus config check configs/single-mlp.toml`; paste "
      << "its output without the first comment line:\n"
      << expected;
}

}  // namespace
}  // namespace chorus::node
