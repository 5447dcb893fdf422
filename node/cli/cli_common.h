// What several `chorus` subcommands do alike: turn --set and their dedicated
// node-setting flags into the ConfigOverrides LoadConfig applies, split
// comma-separated lists, report a failure in one line, and print a built report.
//
// Must not: parse or apply settings (LoadConfig does) or build reports (report.h).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "node/config/config_parse.h"
#include "node/lab/report/report.h"

namespace chorus::node {

// A dedicated flag that sets one node setting, e.g. --epochs N for train.epochs.
struct SettingFlag {
  std::string value;  // as given; empty: the flag was not given, nothing is set
  const char* key;    // "train.epochs"
  const char* flag;   // "--epochs": the setting's origin in LoadConfig's errors
  bool quoted;        // the value is a TOML string (TomlQuote), else written as given
};

// The overrides of a command line, in the order LoadConfig applies them: each
// --set KEY=VALUE (origin "--set KEY=VALUE"), then the given `flags` in order.
std::vector<ConfigOverride> CommandLineOverrides(const std::vector<std::string>& sets,
                                                 std::initializer_list<SettingFlag> flags = {});

// Splits "a,b,c" (empty items dropped).
std::vector<std::string> SplitCommas(const std::string& text);

// Prints "chorus <command>: <message>" to stderr; returns `exit_code`.
int CommandError(std::string_view command, const std::string& message, int exit_code);

// Prints a built report: the table and where the runs ran to stdout, its notes
// to stderr, then "report: <path of report.html>".
void PrintReport(const ReportResult& report);

}  // namespace chorus::node
