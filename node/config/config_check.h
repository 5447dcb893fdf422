// The checks of a Config that one key's parsing cannot make: ranges, and keys
// that must agree with each other. `chorus config check` and a starting node
// run the same checks, so a file the check accepts starts.
#pragma once

#include <string>

#include "common/status.h"
#include "node/config/config.h"

namespace chorus::node {

// Range and cross-field checks (all of them, one error per line in the
// message, each naming where the key was set).
[[nodiscard]] Status ValidateConfig(const Config& config);

// Where `key` ("train.batch_size") was set: "file:line:col", "--set ...", an
// environment variable; the config's source when it was left at its default.
std::string SettingOrigin(const Config& config, const std::string& key);

}  // namespace chorus::node
