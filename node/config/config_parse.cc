// TOML to Config: tables and keys applied through the key table
// (config_fields.h) with source positions, `--set` overrides, and LoadConfig.
//
// toml++ throws toml::parse_error; it is caught in ParseToml() and nowhere else.
// This file does not log.
#include "node/config/config_parse.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>
#include <utility>

#include <toml++/toml.h>

#include "common/files.h"
#include "node/config/config_check.h"
#include "node/config/config_describe.h"
#include "node/config/config_fields.h"
#include "node/config/environment.h"

namespace chorus::node {
namespace {

std::string Where(const std::string& source, const toml::source_region& region) {
  if (region.begin.line == 0) return source;
  return source + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

std::string_view TypeName(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// "a string (\"64\")", "a float (2.5)", "a table".
std::string DescribeNode(const toml::node& node) {
  std::string text(TypeName(node.type()));
  if (const auto* s = node.as_string()) return text + " (" + TomlQuote(s->get()) + ")";
  if (const auto* i = node.as_integer()) return text + " (" + std::to_string(i->get()) + ")";
  if (const auto* f = node.as_floating_point()) return text + " (" + FormatDouble(f->get()) + ")";
  if (const auto* b = node.as_boolean()) return text + (b->get() ? " (true)" : " (false)");
  return text;
}

std::string_view ExpectedType(FieldType type) {
  switch (type) {
    case FieldType::kString:
    case FieldType::kChoice: return "a string";
    case FieldType::kBool: return "a boolean (true or false)";
    case FieldType::kInt: return "an integer";
    case FieldType::kUint64: return "an integer >= 0";
    case FieldType::kDouble: return "a number";
    case FieldType::kStringList: return "an array of strings";
    case FieldType::kIntList: return "an array of integers";
  }
  return "?";
}

// Line `line` (1-based) of `text`, without its newline; empty when out of range.
std::string_view LineOf(std::string_view text, size_t line) {
  for (size_t i = 1; i < line; ++i) {
    size_t newline = text.find('\n');
    if (newline == std::string_view::npos) return {};
    text.remove_prefix(newline + 1);
  }
  return text.substr(0, text.find('\n'));
}

Result<toml::table> ParseToml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    // The description rarely names the key, so show the line with a caret under the column.
    std::string message = Where(source, e.source()) + ": invalid TOML: " + std::string(e.description());
    std::string line(LineOf(text, e.source().begin.line));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) {
      std::replace(line.begin(), line.end(), '\t', ' ');
      const size_t column = std::max<size_t>(e.source().begin.column, 1);
      message += "\n  " + line + "\n  " + std::string(column - 1, ' ') + "^";
    }
    return Err(InvalidArgument(message));
  } catch (const std::exception& e) {
    return Err(Internal(source + ": TOML parser failed: " + e.what()));
  }
}

// Applies every key of `root` it knows; errors go to `errors`. Each applied key
// records its origin: `origin` when given (an override), else file:line:col.
class TableApplier {
 public:
  TableApplier(Config* config, std::string source, std::optional<std::string> origin,
               std::vector<std::string>* errors)
      : config_(config), source_(std::move(source)), origin_(std::move(origin)), errors_(errors) {}

  void ApplyRoot(const toml::table& root) {
    for (auto&& [key, node] : root) {
      const std::string name(key.str());
      // [compare] belongs to `chorus compare` (compare_config.h), which checks it;
      // a compare file is a node config with that table added.
      if (name == kCompareTable && node.is_table()) continue;
      if (!IsSection(name)) {
        ReportUnknownTopLevel(name, node, Where(source_, key.source()));
        continue;
      }
      const toml::table* table = node.as_table();
      if (table == nullptr) {
        Error(Where(source_, key.source()), name,
              "expected a table [" + name + "], got " + DescribeNode(node));
        continue;
      }
      ApplySection(name, *table);
    }
  }

 private:
  // The keys of table `section`; a nested table ([exchange.compression], or the
  // inline `compression = { ... }` inside [exchange]) recurses.
  void ApplySection(const std::string& section, const toml::table& table) {
    for (auto&& [field_key, value] : table) {
      const std::string field_name(field_key.str());
      const std::string where = Where(source_, field_key.source());
      if (const FieldSpec* field = FindField(section, field_name)) {
        ApplyValue(*field, value, where);
        continue;
      }
      const std::string nested = section + "." + field_name;
      if (!IsSection(nested)) {
        ReportUnknownKey(section, field_name, where);
        continue;
      }
      if (const toml::table* sub = value.as_table()) {
        ApplySection(nested, *sub);
      } else {
        Error(where, nested, "expected a table [" + nested + "], got " + DescribeNode(value));
      }
    }
  }

  void Error(const std::string& where, std::string_view key, std::string what) {
    errors_->push_back(origin_.value_or(where) + ": " + std::string(key) + ": " + what);
  }

  void ReportUnknownTopLevel(const std::string& name, const toml::node& node, const std::string& where) {
    std::string what;
    if (node.is_table()) {
      what = "unknown table [" + name + "]";
    } else {
      what = "unknown top-level key (keys belong in a table such as [train])";
      for (const FieldSpec& f : ConfigFields()) {
        if (f.key == name) {
          Error(where, name, what + "; did you mean " + f.Path() + "?");
          return;
        }
      }
    }
    std::vector<std::string> sections(ConfigSections().begin(), ConfigSections().end());
    if (auto near = Closest(name, sections)) {
      what += "; did you mean [" + *near + "]?";
    } else {
      what += "; known tables:";
      for (std::string_view section : ConfigSections()) what += " [" + std::string(section) + "]";
    }
    Error(where, name, what);
  }

  void ReportUnknownKey(const std::string& section, const std::string& key, const std::string& where) {
    std::string what = "unknown key";
    std::vector<std::string> same_section;
    for (const FieldSpec& f : ConfigFields()) {
      if (f.section == section) same_section.emplace_back(f.key);
    }
    for (std::string_view nested : ConfigSections()) {
      if (nested.starts_with(section + ".")) same_section.emplace_back(nested.substr(section.size() + 1));
    }
    if (auto near = Closest(key, same_section)) {
      what += "; did you mean " + section + "." + *near + "?";
    } else {
      for (const FieldSpec& f : ConfigFields()) {
        if (f.key == key) {
          what += "; did you mean " + f.Path() + "?";
          break;
        }
      }
    }
    Error(where, section + "." + key, what);
  }

  // Sets `field` from `node`; each error is recorded where the value was
  // set, and the key keeps no origin then.
  void ApplyValue(const FieldSpec& field, const toml::node& node, const std::string& where) {
    const std::string path = field.Path();
    bool ok = true;
    if (field.type == FieldType::kStringList || field.type == FieldType::kIntList) {
      if (node.as_array() == nullptr) {
        Error(where, path, ExpectedNode(field, node));
        return;
      }
      ok = field.type == FieldType::kStringList
               ? ApplyList<std::string>(*node.as_array(), path, field.get(*config_), "a string",
                                        [](const toml::node& item) -> std::optional<std::string> {
                                          if (const auto* s = item.as_string()) return s->get();
                                          return std::nullopt;
                                        })
               : ApplyList<int>(*node.as_array(), path, field.get(*config_), "a 32-bit integer",
                                [](const toml::node& item) -> std::optional<int> {
                                  const auto* v = item.as_integer();
                                  if (v == nullptr || v->get() < INT_MIN || v->get() > INT_MAX) return std::nullopt;
                                  return static_cast<int>(v->get());
                                });
    } else if (std::optional<std::string> error = ApplyScalar(field, node)) {
      Error(where, path, *error);
      ok = false;
    }
    if (ok) config_->origins[path] = origin_.value_or(where);
  }

  static std::string ExpectedNode(const FieldSpec& field, const toml::node& node) {
    return "expected " + std::string(ExpectedType(field.type)) + ", got " + DescribeNode(node);
  }

  // A one-value key; returns what was expected when `node` does not fit.
  std::optional<std::string> ApplyScalar(const FieldSpec& field, const toml::node& node) {
    switch (field.type) {
      case FieldType::kChoice:
        if (const auto* s = node.as_string()) return field.choice.set(*config_, s->get());
        break;
      case FieldType::kString:
        if (const auto* s = node.as_string()) return Set<std::string>(field, s->get());
        break;
      case FieldType::kBool:
        if (const auto* b = node.as_boolean()) return Set<bool>(field, b->get());
        break;
      case FieldType::kInt:
        if (const auto* i = node.as_integer()) {
          if (i->get() < INT_MIN || i->get() > INT_MAX) return "expected a 32-bit integer, got " + std::to_string(i->get());
          return Set<int>(field, static_cast<int>(i->get()));
        }
        break;
      case FieldType::kUint64:
        if (const auto* i = node.as_integer(); i != nullptr && i->get() >= 0) {
          return Set<uint64_t>(field, static_cast<uint64_t>(i->get()));
        }
        break;
      case FieldType::kDouble:
        if (const auto* f = node.as_floating_point()) return Set<double>(field, f->get());
        if (const auto* i = node.as_integer()) return Set<double>(field, static_cast<double>(i->get()));
        break;
      case FieldType::kStringList:
      case FieldType::kIntList:
        break;
    }
    return ExpectedNode(field, node);
  }

  template <typename T>
  std::optional<std::string> Set(const FieldSpec& field, T value) {
    *static_cast<T*>(field.get(*config_)) = std::move(value);
    return std::nullopt;
  }

  // A list key: every item checked, each with its own origin ("key[i]"); the
  // list is set only when all items are good.
  template <typename T, typename ItemOf>
  bool ApplyList(const toml::array& array, const std::string& path, void* target, std::string_view expected,
                 ItemOf item_of) {
    std::vector<T> items;
    bool ok = true;
    for (size_t i = 0; i < array.size(); ++i) {
      const toml::node& item = *array.get(i);
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      const std::string item_where = Where(source_, item.source());
      if (std::optional<T> value = item_of(item)) {
        items.push_back(std::move(*value));
        config_->origins[item_path] = origin_.value_or(item_where);
      } else {
        Error(item_where, item_path, "expected " + std::string(expected) + ", got " + DescribeNode(item));
        ok = false;
      }
    }
    if (ok) *static_cast<std::vector<T>*>(target) = std::move(items);
    return ok;
  }

  Config* config_;
  std::string source_;
  std::optional<std::string> origin_;
  std::vector<std::string>* errors_;
};

}  // namespace

Config DefaultConfig() {
  Config config;
  config.source = "<built-in default>";
  return config;
}

Result<Config> ParseConfigString(std::string_view text, std::string source_name) {
  Config config = DefaultConfig();
  config.source = source_name;
  CHORUS_ASSIGN_OR_RETURN(toml::table root, ParseToml(text, source_name));
  std::vector<std::string> errors;
  TableApplier(&config, source_name, std::nullopt, &errors).ApplyRoot(root);
  Status valid = ValidateConfig(config);
  if (!valid.ok()) errors.push_back(valid.message());
  if (!errors.empty()) return Err(InvalidArgument(JoinLines(errors)));
  return config;
}

Result<Config> ParseConfigFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return Err(text.error().WithContext(path + ": cannot read config file"));
  return ParseConfigString(*text, path);
}

Status ApplyOverride(Config* config, std::string_view assignment, std::string_view origin) {
  const std::string where(origin);
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    return InvalidArgument(where + ": expected section.key=value, got " + TomlQuote(assignment));
  }
  const std::string path = Trim(assignment.substr(0, eq));
  const std::string value = Trim(assignment.substr(eq + 1));
  const size_t dot = path.rfind('.');  // the key follows the last dot: exchange.compression.codec
  const FieldSpec* field =
      dot == std::string::npos ? nullptr : FindField(path.substr(0, dot), path.substr(dot + 1));
  if (field == nullptr && IsSection(path)) {
    for (const FieldSpec& f : ConfigFields()) {
      if (f.section == path) {
        return InvalidArgument(where + ": " + path + ": a table, not a key; set one of its keys, such as " +
                               f.Path());
      }
    }
  }
  if (field == nullptr) {
    std::string what = where + ": " + path + ": unknown key";
    if (auto near = Closest(path, ConfigKeyPaths())) what += "; did you mean " + *near + "?";
    return InvalidArgument(what);
  }
  if (value.empty()) return InvalidArgument(where + ": " + path + ": missing value after '='");

  // Strings may be given bare (run.name=trial-3), lists as "a:1,b:2".
  std::string toml_value = value;
  if ((field->type == FieldType::kString || field->type == FieldType::kChoice) && value.front() != '"' &&
      value.front() != '\'') {
    toml_value = TomlQuote(value);
  } else if (field->type == FieldType::kIntList && value.front() != '[') {
    toml_value = "[" + value + "]";  // topology.dims=2,4
  } else if (field->type == FieldType::kStringList && value.front() != '[') {
    toml_value = "[";
    std::string_view rest(value);
    while (true) {
      size_t comma = rest.find(',');
      toml_value += (toml_value.size() > 1 ? ", " : "") + TomlQuote(Trim(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    toml_value += "]";
  }
  const std::string document =
      "[" + std::string(field->section) + "]\n" + std::string(field->key) + " = " + toml_value + "\n";
  Result<toml::table> root = ParseToml(document, where);
  if (!root) {
    return InvalidArgument(where + ": " + path + ": expected " + std::string(ExpectedType(field->type)) +
                           ", got " + TomlQuote(value));
  }
  // Exactly one table on each level down to the section, holding exactly one key.
  bool single = true;
  const toml::table* section = &*root;
  std::string_view rest = field->section;
  while (single) {
    const size_t next = rest.find('.');
    const std::string_view part = rest.substr(0, next);
    single = section->size() == 1 && (section = (*section)[part].as_table()) != nullptr;
    if (next == std::string_view::npos) break;
    rest.remove_prefix(next + 1);
  }
  if (!single || section->size() != 1) {
    return InvalidArgument(where + ": " + path + ": expected a single TOML value, got " + TomlQuote(value));
  }
  std::vector<std::string> errors;
  TableApplier(config, where, where, &errors).ApplyRoot(*root);
  if (!errors.empty()) return InvalidArgument(JoinLines(errors));
  return Status::Ok();
}

Result<Config> LoadConfig(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  Config config = DefaultConfig();
  if (!path.empty()) {
    CHORUS_ASSIGN_OR_RETURN(config, ParseConfigFile(path));
  }
  for (const ConfigOverride& o : overrides) {
    CHORUS_RETURN_IF_ERROR(ApplyOverride(&config, o.assignment, o.origin));
  }
  CHORUS_RETURN_IF_ERROR(ApplyEnvironmentHints(&config));
  CHORUS_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

}  // namespace chorus::node
