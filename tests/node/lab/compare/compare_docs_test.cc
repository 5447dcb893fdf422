// The methods the docs list against the program's: docs/cli-and-configs.md's
// "Built-in methods" list and its table of methods are BuiltinMethods(), in
// order, with their labels; docs/lab.md's list of the main job's methods is
// configs/compare/default.toml's; the example [compare] table there gives
// every key the parser accepts (CompareKeys) and no other. A method or key
// added, renamed or dropped fails here until the docs say so too.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
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

// The keys the example [compare] table of docs/cli-and-configs.md sets (the
// lines "key = ..." of its first ```toml block, up to [[compare.method]]),
// with "method" for that array.
std::set<std::string> DocumentedCompareKeys() {
  const std::string section = Section(SourceText("docs/cli-and-configs.md"), "### The `[compare]` table");
  const size_t begin = section.find("```toml\n");
  const size_t end = section.find("```", begin + 1);
  std::stringstream block(begin == std::string::npos || end == std::string::npos ? ""
                                                                                 : section.substr(begin, end - begin));
  std::set<std::string> keys;
  for (std::string line; std::getline(block, line);) {
    if (line.rfind("[[compare.method]]", 0) == 0) {
      keys.insert("method");
      break;
    }
    const size_t equals = line.find(" =");
    if (line.empty() || line[0] == '[' || line[0] == '`' || equals == std::string::npos) continue;
    keys.insert(line.substr(0, equals));
  }
  return keys;
}

TEST(CompareDocsTest, TheExampleCompareTableGivesEveryKeyTheParserAccepts) {
  const std::set<std::string> program(CompareKeys().begin(), CompareKeys().end());
  EXPECT_EQ(DocumentedCompareKeys(), program)
      << "docs/cli-and-configs.md, \"The [compare] table\": its example sets other keys than CompareKeys() "
         "(node/lab/compare/compare_config.cc) accepts";
}

TEST(CompareDocsTest, TheLabPageListsTheMainJobsMethods) {
  Result<CompareConfig> main_job = ParseCompareFile(std::string(CHORUS_SOURCE_DIR) + "/configs/compare/default.toml");
  ASSERT_TRUE(main_job) << main_job.error().ToString();
  EXPECT_EQ(CodeWordsAfter(SourceText("docs/lab.md"), "The main job's methods, in order: "), Names(main_job->methods))
      << "docs/lab.md: \"The main job's methods, in order: `...`\" differs from configs/compare/default.toml's";
  EXPECT_EQ(Names(main_job->methods), DefaultMethodNames())
      << "the main job runs the default matrix (DefaultMethodNames)";
}

}  // namespace
}  // namespace chorus::node
