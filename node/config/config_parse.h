// Reading, checking and printing a node's configuration (the structs of config.h).
//
// TOML files use the tables [run], [train], [loss_scale], [data], [cluster],
// [fabric], [exchange], [exchange.compression] (also written inline inside
// [exchange] as `compression = { codec = "sign" }`) and [topology], with keys
// named exactly as the struct fields. Every error names where
// the offending key was set, the key path and what was expected:
//   configs/x.toml:7:1: train.batch_size: expected an integer >= 1, got 0
// Unknown keys suggest the closest known one. Nothing here throws (toml++ parse
// errors are caught in config_parse.cc) and nothing here logs: callers decide.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "node/config/config.h"
#include "node/config/host_port.h"  // HostPort, ParseHostPort (cluster addresses are checked here)

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
// "[2, 4]"); for string keys a bare word is taken as a string, and for list keys
// "a:1,b:2" as a list of strings and "2,4" as a list of integers.
// Checks the key and the value's type; range and cross-field checks are left to
// ValidateConfig so that several overrides can be applied first. `origin` names
// the override in later error messages (e.g. "--set train.epochs=3", "--epochs").
[[nodiscard]] Status ApplyOverride(Config* config, std::string_view assignment,
                                   std::string_view origin);

// Fills cluster.rank_hint (when -1) from SLURM_PROCID or OMPI_COMM_WORLD_RANK,
// and cluster.min_nodes (when not set explicitly) from SLURM_NTASKS or
// OMPI_COMM_WORLD_SIZE. A malformed variable is an error naming it.
using EnvLookup = std::function<const char*(const char*)>;
[[nodiscard]] Status ApplyEnvironmentHints(Config* config);
[[nodiscard]] Status ApplyEnvironmentHints(Config* config, const EnvLookup& getenv_fn);

// The integer in environment variable `name` (its value `text`), at least `min`
// and at most INT_MAX; the error names the variable and the value.
[[nodiscard]] Result<int64_t> ParseEnvInteger(const char* name, const char* text, int64_t min);

// Range and cross-field checks (all of them, one error per line in the message).
[[nodiscard]] Status ValidateConfig(const Config& config);

// The resolved settings as TOML: every table and key, defaults included, with a
// short comment per key. Parsing the output gives back the same settings.
std::string DescribeConfig(const Config& config);

// The settings every member of a cluster must share, one "key = value" line
// per key of [exchange] (its subtables included) and [topology], and per
// [train] / [data] key that fixes what a step computes (model, precision,
// optimizer and schedule, seed, data.train_limit), in file order: members that
// disagree on them would run different collectives or graphs, or train
// different models (under all-reduce: buffers of different lengths, or
// replicas that drift apart). Batch size, device and the rest stay per node.
std::string SharedSettingsText(const Config& config);

// Every known key path ("run.name", ..., "exchange.compression.codec", ...,
// "topology.seed"), in file order.
std::vector<std::string> ConfigKeyPaths();

// A TOML basic string literal for `text` (quoted and escaped).
std::string TomlQuote(std::string_view text);

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
