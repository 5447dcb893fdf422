// The helpers the subcommands share (see cli_common.h).
#include "node/cli/cli_common.h"

#include <cstdio>
#include <sstream>

#include "node/config/config_describe.h"

namespace chorus::node {

std::vector<ConfigOverride> CommandLineOverrides(const std::vector<std::string>& sets,
                                                 std::initializer_list<SettingFlag> flags) {
  std::vector<ConfigOverride> overrides;
  for (const std::string& s : sets) overrides.push_back({s, "--set " + s});
  for (const SettingFlag& f : flags) {
    if (f.value.empty()) continue;
    overrides.push_back({std::string(f.key) + "=" + (f.quoted ? TomlQuote(f.value) : f.value), f.flag});
  }
  return overrides;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

int CommandError(std::string_view command, const std::string& message, int exit_code) {
  std::fprintf(stderr, "chorus %s: %s\n", std::string(command).c_str(), message.c_str());
  return exit_code;
}

void PrintReport(const ReportResult& report) {
  std::fputs(report.table_text.c_str(), stdout);
  std::fputs(report.environment_text.c_str(), stdout);
  for (const std::string& warning : report.warnings) std::fprintf(stderr, "note: %s\n", warning.c_str());
  std::printf("report: %s\n", report.html_path.c_str());
  std::fflush(stdout);
}

}  // namespace chorus::node
