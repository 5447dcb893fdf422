// The flag tables of docs/cli-and-configs.md against the program: under each
// "### `chorus <command> ...`" heading, the first column of the first table
// names exactly the flags that command's CLI11 options have
// (DescribeCommandFlags builds the same app RunCli parses with), so a flag
// added, renamed or removed fails here until its table says so too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "node/cli/cli.h"
#include "tests/util/docs_text.h"

namespace chorus::node {
namespace {

using chorus::testing::FirstTableRows;
using chorus::testing::FlagNames;
using chorus::testing::Lines;
using chorus::testing::Section;
using chorus::testing::SourceText;

constexpr char kPage[] = "docs/cli-and-configs.md";

// The command a subcommand heading documents: "### `chorus launch -n N [CONFIG]`"
// -> "launch", "### `chorus bench p2p`" -> "bench p2p" (its lower-case words
// before the first flag or argument); "" for other lines.
std::string HeadingCommand(const std::string& line) {
  const std::string open = "### `chorus ";
  if (line.rfind(open, 0) != 0) return "";
  std::string command;
  size_t at = open.size();
  while (at < line.size() && std::islower(static_cast<unsigned char>(line[at]))) {
    size_t end = at;
    while (end < line.size() && (std::islower(static_cast<unsigned char>(line[end])) ||
                                 std::isdigit(static_cast<unsigned char>(line[end])) || line[end] == '-')) {
      ++end;
    }
    command += (command.empty() ? "" : " ") + line.substr(at, end - at);
    at = end;
    while (at < line.size() && line[at] == ' ') ++at;
  }
  return command;
}

// Each documented command's heading line, by command.
std::map<std::string, std::string> DocumentedCommands(const std::string& page) {
  std::map<std::string, std::string> headings;
  for (const std::string& line : Lines(page)) {
    if (const std::string command = HeadingCommand(line); !command.empty()) headings[command] = line;
  }
  return headings;
}

// The flags the table under `heading` names, in its first column.
std::set<std::string> TableFlags(const std::string& page, const std::string& heading) {
  std::set<std::string> flags;
  for (const std::vector<std::string>& row : FirstTableRows(Section(page, heading))) {
    if (row.empty()) continue;
    for (const std::string& name : FlagNames(row.front())) flags.insert(name);
  }
  return flags;
}

std::string Joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

TEST(CliDocsTest, HeadingCommandTakesTheWordsBeforeTheArguments) {
  EXPECT_EQ(HeadingCommand("### `chorus launch -n N [CONFIG] [-- ARGS...]`"), "launch");
  EXPECT_EQ(HeadingCommand("### `chorus config check FILE`"), "config check");
  EXPECT_EQ(HeadingCommand("### `chorus bench p2p`"), "bench p2p");
  EXPECT_EQ(HeadingCommand("## Subcommands"), "");
}

TEST(CliDocsTest, EveryCommandsFlagTableNamesExactlyItsFlags) {
  const std::string page = SourceText(kPage);
  ASSERT_FALSE(page.empty()) << kPage << " is unreadable";
  const std::vector<CommandFlags> commands = DescribeCommandFlags();
  ASSERT_GE(commands.size(), 9u) << "the app should have node, launch, compare and more";
  std::map<std::string, std::string> documented = DocumentedCommands(page);
  for (const CommandFlags& command : commands) {
    SCOPED_TRACE("chorus " + command.command);
    auto heading = documented.find(command.command);
    ASSERT_NE(heading, documented.end()) << kPage << " has no \"### `chorus " << command.command
                                         << " ...`\" section with its flag table";
    const std::set<std::string> program(command.flags.begin(), command.flags.end());
    const std::set<std::string> docs = TableFlags(page, heading->second);
    std::set<std::string> missing;
    std::set<std::string> extra;
    std::set_difference(program.begin(), program.end(), docs.begin(), docs.end(),
                        std::inserter(missing, missing.end()));
    std::set_difference(docs.begin(), docs.end(), program.begin(), program.end(), std::inserter(extra, extra.end()));
    EXPECT_TRUE(missing.empty()) << kPage << ", " << heading->second << ": its flag table lacks " << Joined(missing);
    EXPECT_TRUE(extra.empty()) << kPage << ", " << heading->second << ": its flag table lists " << Joined(extra)
                               << ", which the command does not have";
    documented.erase(heading);
  }
  // A documented command without flags must still exist: the ones left here
  // have no flags in the program, or are not commands at all.
  for (const auto& [command, heading] : documented) {
    EXPECT_TRUE(TableFlags(page, heading).empty())
        << kPage << ", " << heading << ": lists flags, but `chorus " << command << "` has none or does not exist";
  }
}

}  // namespace
}  // namespace chorus::node
