// The config files the docs name against configs/: every file under configs/
// has a row in docs/cli-and-configs.md's "Example configs" table (and every
// comparison file one in docs/lab.md's), every configs/... file any page
// names exists and passes what `chorus config check` checks of its settings,
// and the figures a row gives ("4 nodes", "9 methods", "10 inner steps",
// "3 epochs") are the file's.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "node/config/config_parse.h"
#include "node/lab/compare/compare_config.h"
#include "tests/util/docs_text.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using chorus::testing::CodeSpans;
using chorus::testing::FirstTableRows;
using chorus::testing::Section;
using chorus::testing::SourceText;

// Every .toml under configs/, as "configs/<relative path>".
std::set<std::string> ConfigFiles() {
  std::set<std::string> files;
  const fs::path root = fs::path(CHORUS_SOURCE_DIR);
  for (const auto& entry : fs::recursive_directory_iterator(root / "configs")) {
    if (entry.is_regular_file() && entry.path().extension() == ".toml") {
      files.insert(fs::relative(entry.path(), root).string());
    }
  }
  return files;
}

// The files a table row's first cell names: "`configs/examples/a.toml`,
// `b.toml`" -> configs/examples/a.toml and configs/examples/b.toml (a bare
// name is in the folder of the one before it).
std::vector<std::string> RowFiles(const std::string& cell) {
  std::vector<std::string> files;
  std::string folder;
  for (const std::string& span : CodeSpans(cell)) {
    if (span.size() < 5 || span.substr(span.size() - 5) != ".toml") continue;
    const size_t slash = span.rfind('/');
    if (slash != std::string::npos) folder = span.substr(0, slash + 1);
    files.push_back(slash == std::string::npos ? folder + span : span);
  }
  return files;
}

// The figures of `description` that say something of a file: "4 nodes" ->
// {"nodes", 4}, and so for "methods", "inner steps" and "epochs".
std::map<std::string, int> Figures(const std::string& description) {
  static const std::regex kFigure(R"((\d+) (nodes|methods|inner steps|epochs)\b)");
  std::map<std::string, int> figures;
  for (std::sregex_iterator it(description.begin(), description.end(), kFigure), end; it != end; ++it) {
    figures[(*it)[2]] = std::stoi((*it)[1]);
  }
  return figures;
}

// What `chorus config check` checks of the settings (LoadConfig, and for a
// comparison file its [compare] table); the data set's files, which it also
// looks for, are the host's, not the file's. `compare` receives the table.
std::string CheckFailure(const std::string& file, CompareConfig* compare) {
  const std::string path = std::string(CHORUS_SOURCE_DIR) + "/" + file;
  if (!fs::exists(path)) return "does not exist";
  Result<Config> config = LoadConfig(path, {});
  if (!config) return config.error().message();
  Result<CompareConfig> table = ParseCompareFile(path);
  if (!table) return table.error().message();
  *compare = *table;
  return "";
}

// Checks a configs table: each row's files exist and pass, and its figures
// are theirs. Returns the files it lists.
std::set<std::string> CheckConfigsTable(const std::string& page, const std::string& heading) {
  std::set<std::string> listed;
  const std::vector<std::vector<std::string>> rows = FirstTableRows(Section(SourceText(page), heading));
  EXPECT_FALSE(rows.empty()) << page << " has no table under \"" << heading << "\"";
  for (const std::vector<std::string>& row : rows) {
    if (row.size() < 2) continue;
    for (const std::string& file : RowFiles(row[0])) {
      SCOPED_TRACE(page + ", the row of " + file);
      listed.insert(file);
      CompareConfig compare;
      const std::string failure = CheckFailure(file, &compare);
      if (!failure.empty()) {
        ADD_FAILURE() << file << ": " << failure;
        continue;
      }
      const Config config = *LoadConfig(std::string(CHORUS_SOURCE_DIR) + "/" + file, {});
      const bool comparison = SourceText(file).find("[compare]") != std::string::npos;
      for (const auto& [what, figure] : Figures(row[1])) {
        int actual = 0;
        if (what == "nodes") actual = comparison ? compare.nodes : config.cluster.min_nodes;
        if (what == "methods") actual = static_cast<int>(compare.methods.size());
        if (what == "inner steps") actual = config.exchange.outer.period;
        if (what == "epochs") actual = config.train.epochs;
        EXPECT_EQ(figure, actual) << page << " says " << file << " has " << figure << " " << what;
      }
    }
  }
  return listed;
}

TEST(ExampleConfigsDocsTest, FiguresInDescriptionsAreRead) {
  const std::map<std::string, int> figures = Figures("the main job: 9 methods, 4 nodes, MLP, 3 epochs, 10 inner steps");
  EXPECT_EQ(figures, (std::map<std::string, int>{{"methods", 9}, {"nodes", 4}, {"epochs", 3}, {"inner steps", 10}}));
  EXPECT_EQ(RowFiles("`configs/examples/a.toml`, `b.toml`"),
            (std::vector<std::string>{"configs/examples/a.toml", "configs/examples/b.toml"}));
}

TEST(ExampleConfigsDocsTest, EveryConfigFileHasARowThatSaysWhatItHolds) {
  const std::set<std::string> listed = CheckConfigsTable("docs/cli-and-configs.md", "## Example configs");
  for (const std::string& file : ConfigFiles()) {
    EXPECT_TRUE(listed.count(file)) << "docs/cli-and-configs.md, \"Example configs\": no row for " << file;
  }
}

TEST(ExampleConfigsDocsTest, EveryComparisonFileHasARowInTheLabPage) {
  const std::set<std::string> listed = CheckConfigsTable("docs/lab.md", "### The comparison files");
  for (const std::string& file : ConfigFiles()) {
    if (file.rfind("configs/compare/", 0) != 0) continue;
    EXPECT_TRUE(listed.count(file)) << "docs/lab.md, \"The comparison files\": no row for " << file;
  }
}

// Names in capitals (configs/CONFIG.toml) are placeholders, not files.
TEST(ExampleConfigsDocsTest, EveryConfigFileThePagesNameExistsAndPassesConfigCheck) {
  static const std::regex kNamed(R"(configs/[a-z0-9_./-]+\.toml)");
  std::vector<std::string> pages = {"README.md"};
  for (const auto& entry : fs::directory_iterator(fs::path(CHORUS_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() == ".md") pages.push_back("docs/" + entry.path().filename().string());
  }
  int named = 0;
  for (const std::string& page : pages) {
    const std::string text = SourceText(page);
    std::set<std::string> files;
    for (std::sregex_iterator it(text.begin(), text.end(), kNamed), end; it != end; ++it) files.insert(it->str());
    for (const std::string& file : files) {
      ++named;
      CompareConfig compare;
      const std::string failure = CheckFailure(file, &compare);
      EXPECT_TRUE(failure.empty()) << page << " names " << file << ": " << failure;
    }
  }
  EXPECT_GE(named, 10) << "the pages should name the example configs";
}

}  // namespace
}  // namespace chorus::node
