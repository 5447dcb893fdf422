// Reading a node's configuration (the structs of config.h) from TOML.
//
// TOML files use the tables [run], [train], [loss_scale], [data], [cluster],
// [fabric], [exchange], [exchange.compression] (also written inline inside
// [exchange] as `compression = { codec = "sign" }`), [exchange.crossovers] and
// [topology], with keys named exactly as the struct fields. Every error names
// where the offending key was set, the key path and what was expected:
//   configs/x.toml:7:1: train.batch_size: expected an integer >= 1, got 0
// Unknown keys and names suggest the closest known one. Nothing here throws
// (toml++ parse errors are caught in config_parse.cc) and nothing here logs:
// callers decide.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "node/config/config.h"
#include "node/config/config_check.h"  // ValidateConfig
#include "node/config/environment.h"   // ApplyEnvironmentHints

namespace chorus::node {

// The top-level table that node parsing skips: `chorus compare`'s settings
// ([compare]), so one file configures both the comparison and its nodes.
inline constexpr std::string_view kCompareTable = "compare";

// The built-in default (what configs/single-mlp.toml spells out); source is
// "<built-in default>".
Config DefaultConfig();

// Reads and parses a TOML file, then validates it (ValidateConfig).
[[nodiscard]] Result<Config> ParseConfigFile(const std::string& path);
// Same for text already in memory; `source_name` is used in error messages.
[[nodiscard]] Result<Config> ParseConfigString(std::string_view text, std::string source_name);

// Applies one "section.key=value" override (as given to `--set`); the key is what
// follows the last dot, so nested tables work ("exchange.compression.codec=sign").
// The value is TOML ("128", "0.05", "true", "\"name\"", "[\"a:1\", \"b:2\"]",
// "[2, 4]"); for string and name keys a bare word is taken as a string, and for
// list keys "a:1,b:2" as a list of strings and "2,4" as a list of integers.
// Checks the key, the value's type and a name's spelling; range and cross-field
// checks are left to ValidateConfig so that several overrides can be applied
// first. `origin` names the override in later error messages (e.g.
// "--set train.epochs=3", "--epochs").
[[nodiscard]] Status ApplyOverride(Config* config, std::string_view assignment,
                                   std::string_view origin);

// One override for LoadConfig: a "section.key=value" assignment and the
// origin that errors name ("--set train.epochs=3", "--epochs").
struct ConfigOverride {
  std::string assignment;
  std::string origin;
};

// The config of `path` (the built-in default when empty), with `overrides`
// applied in order, then environment hints, then validated.
[[nodiscard]] Result<Config> LoadConfig(const std::string& path, const std::vector<ConfigOverride>& overrides);

}  // namespace chorus::node
