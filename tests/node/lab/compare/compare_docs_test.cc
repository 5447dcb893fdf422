// The methods the docs list against the program's: docs/cli-and-configs.md's
// "Built-in methods" list and its table of methods are BuiltinMethods(), in
// order, with their labels; docs/lab.md's list of the main job's methods is
// configs/compare/default.toml's. A method added, renamed or dropped fails
// here until the docs say so too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "node/lab/compare/compare_config.h"
#include "tests/util/docs_text.h"

namespace chorus::node {
namespace {

using chorus::testing::CodeSpans;
using chorus::testing::CodeWordsAfter;
using chorus::testing::FirstTableRows;
using chorus::testing::Section;
using chorus::testing::SourceText;

std::vector<std::string> Names(const std::vector<CompareMethod>& methods) {
  std::vector<std::string> names;
  for (const CompareMethod& m : methods) names.push_back(m.name);
  return names;
}

TEST(CompareDocsTest, TheBuiltInMethodsListIsTheProgramsInOrder) {
  const std::string page = SourceText("docs/cli-and-configs.md");
  EXPECT_EQ(CodeWordsAfter(page, "Built-in methods: "), Names(BuiltinMethods()))
      << "docs/cli-and-configs.md, `chorus compare`: the \"Built-in methods: `...`\" list differs from "
         "BuiltinMethods() (node/lab/compare/compare_config.cc)";
}

TEST(CompareDocsTest, TheMethodsTableHasEveryBuiltInMethodWithItsLabel) {
  const std::vector<std::vector<std::string>> rows =
      FirstTableRows(Section(SourceText("docs/cli-and-configs.md"), "### The `[compare]` table"));
  std::vector<std::string> names;
  std::vector<std::string> labels;
  for (const std::vector<std::string>& row : rows) {
    const std::vector<std::string> spans = row.empty() ? std::vector<std::string>{} : CodeSpans(row[0]);
    names.push_back(spans.empty() ? row.at(0) : spans.front());
    labels.push_back(row.size() > 1 ? row[1] : "");
  }
  std::vector<std::string> expected_labels;
  for (const CompareMethod& m : BuiltinMethods()) expected_labels.push_back(m.label);
  EXPECT_EQ(names, Names(BuiltinMethods()))
      << "docs/cli-and-configs.md, \"The [compare] table\": the methods table's names differ from BuiltinMethods()";
  EXPECT_EQ(labels, expected_labels) << "docs/cli-and-configs.md: the methods table's labels differ";
}

TEST(CompareDocsTest, TheLabPageListsTheMainJobsMethods) {
  Result<CompareConfig> main_job = ParseCompareFile(std::string(CHORUS_SOURCE_DIR) + "/configs/compare/default.toml");
  ASSERT_TRUE(main_job) << main_job.error().ToString();
  EXPECT_EQ(CodeWordsAfter(SourceText("docs/lab.md"), "The main job's methods, in order: "), Names(main_job->methods))
      << "docs/lab.md: \"The main job's methods, in order: `...`\" differs from configs/compare/default.toml's";
  EXPECT_EQ(Names(main_job->methods), DefaultMethodNames())
      << "the main job runs the default matrix, which the docs call the first nine built-in methods";
}

}  // namespace
}  // namespace chorus::node
