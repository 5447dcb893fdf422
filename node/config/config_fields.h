// The one table of config keys: where each key lives in a Config, its type,
// its help line and, for keys written as names, the names it accepts (read
// from the EnumName tables beside each enum). Parsing (config_parse.cc),
// checks (config_check.cc) and printing (config_describe.cc) all read it, so
// a new field of config.h needs one line in kFields (config_fields.cc) and
// its range checks in ValidateConfig. Internal to node/config/.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/config/config.h"

namespace chorus::node {

enum class FieldType { kString, kBool, kInt, kUint64, kDouble, kStringList, kIntList, kChoice };

// A key written as a name in TOML and held as an enum (or as a trainer::Device).
struct ChoiceAccess {
  // The names accepted, for help and errors; a pattern such as "cuda:N" may stand among them.
  std::vector<std::string_view> (*names)() = nullptr;
  // The name of the value the config holds.
  std::string (*get)(const Config&) = nullptr;
  // Sets the value named `text`, or returns what was expected (no key, no origin).
  std::optional<std::string> (*set)(Config&, std::string_view text) = nullptr;
};

struct FieldSpec {
  std::string_view section;  // TOML table, e.g. "train" or "exchange.compression"
  std::string_view key;      // key inside it, e.g. "batch_size"
  FieldType type;
  void* (*get)(Config&);     // the field inside a Config, of the C++ type matching `type` (not kChoice)
  std::string_view help;     // one line, printed by DescribeConfig (kChoice: before the names)
  ChoiceAccess choice;       // kChoice only

  std::string Path() const { return std::string(section) + "." + std::string(key); }
  // The help line, with " | "-joined names for a kChoice.
  std::string Help() const;
};

// Every key, in file order.
std::span<const FieldSpec> ConfigFields();
// Every table, parents before the tables nested in them.
std::span<const std::string_view> ConfigSections();
const FieldSpec* FindField(std::string_view section, std::string_view key);
bool IsSection(std::string_view name);

// The value of `field` in `config` as TOML.
std::string FormatValue(const FieldSpec& field, const Config& config);

// Text helpers shared by the folder's files.
std::optional<std::string> Closest(std::string_view word, const std::vector<std::string>& candidates);
std::string FormatDouble(double v);
std::string Trim(std::string_view s);
std::string JoinLines(const std::vector<std::string>& lines);
// `expected one of "a", "b", got "c" (did you mean "a"?)`.
std::string ExpectedOneOf(const std::vector<std::string_view>& names, std::string_view got);

}  // namespace chorus::node
