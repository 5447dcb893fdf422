// A Config printed back as TOML: every key with its value and help line
// (`chorus config check`), the settings the members of a cluster must share,
// and the list of key paths.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "node/config/config.h"

namespace chorus::node {

// The resolved settings as TOML: every table and key, defaults included, with a
// short comment per key (for keys written as names: the names accepted).
// Parsing the output gives back the same settings.
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

}  // namespace chorus::node
