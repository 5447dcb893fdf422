// TOML to Config: the field table, type checks with source positions, overrides,
// environment hints, range and cross-field validation, and printing back as TOML.
//
// toml++ throws toml::parse_error; it is caught in ParseToml() and nowhere else.
// Each key is listed once, in kFields; parsing, printing and the list of key
// paths all come from that table, so a new field of config.h needs one line there
// and its checks in ValidateConfig. This file does not log.
#include "node/config/config_parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include <toml++/toml.h>

#include "common/files.h"
#include "node/config/host_port.h"
#include "trainer/device_model.h"

namespace chorus::node {
namespace {

// ---------------------------------------------------------------------------
// The field table.

enum class FieldType { kString, kBool, kInt, kUint64, kDouble, kStringList, kIntList };

template <typename T>
constexpr FieldType FieldTypeOf() {
  if constexpr (std::is_same_v<T, std::string>) {
    return FieldType::kString;
  } else if constexpr (std::is_same_v<T, bool>) {
    return FieldType::kBool;
  } else if constexpr (std::is_same_v<T, int>) {
    return FieldType::kInt;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return FieldType::kUint64;
  } else if constexpr (std::is_same_v<T, double>) {
    return FieldType::kDouble;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return FieldType::kStringList;
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    return FieldType::kIntList;
  } else {
    static_assert(sizeof(T) == 0, "config field of a type FieldType does not cover: add it");
  }
}

struct FieldSpec {
  std::string_view section;  // TOML table, e.g. "train" or "exchange.compression"
  std::string_view key;      // key inside it, e.g. "batch_size"
  FieldType type;
  void* (*get)(Config&);     // the field inside a Config, of the C++ type matching `type`
  std::string_view help;     // one line, printed by DescribeConfig

  std::string Path() const { return std::string(section) + "." + std::string(key); }
};

// `sec` is the member path of the table's struct inside Config; its text, dots
// included, is the TOML table name (exchange.compression -> [exchange.compression]).
#define CHORUS_CONFIG_FIELD(sec, name, help_text)                                        \
  FieldSpec {                                                                            \
    #sec, #name,                                                                         \
        FieldTypeOf<std::remove_cvref_t<decltype(std::declval<Config&>().sec.name)>>(), \
        [](Config& c) -> void* { return &c.sec.name; }, help_text                        \
  }

const FieldSpec kFields[] = {
    CHORUS_CONFIG_FIELD(run, name, "runs/<name>/<node>/..."),
    CHORUS_CONFIG_FIELD(run, node_name, "empty: \"node<rank>\""),
    CHORUS_CONFIG_FIELD(run, output_dir, "parent of the run folders"),
    CHORUS_CONFIG_FIELD(run, log_level, "trace | debug | info | warn | error | off"),
    CHORUS_CONFIG_FIELD(run, progress, "auto | bar | lines | off"),

    CHORUS_CONFIG_FIELD(train, model, "mlp | cnn | cnn-bn"),
    CHORUS_CONFIG_FIELD(train, precision, "fp16 | fp32"),
    CHORUS_CONFIG_FIELD(train, optimizer, "lars | sgd"),
    CHORUS_CONFIG_FIELD(train, device, "cpu | cuda | cuda:N"),
    CHORUS_CONFIG_FIELD(train, cuda_graphs, "GPU: replay each pass as a CUDA graph"),
    CHORUS_CONFIG_FIELD(train, epochs, ">= 0"),
    CHORUS_CONFIG_FIELD(train, batch_size, "per node, >= 1"),
    CHORUS_CONFIG_FIELD(train, base_lr, "lr = base_lr * global_batch / 256"),
    CHORUS_CONFIG_FIELD(train, momentum, "in [0, 1)"),
    CHORUS_CONFIG_FIELD(train, weight_decay, "not applied to biases and BatchNorm"),
    CHORUS_CONFIG_FIELD(train, lars_eta, "LARS trust coefficient"),
    CHORUS_CONFIG_FIELD(train, warmup_epochs, "linear warm-up"),
    CHORUS_CONFIG_FIELD(train, lr_decay_power, "polynomial decay power"),
    CHORUS_CONFIG_FIELD(train, threads, "compute threads, 1..256"),
    CHORUS_CONFIG_FIELD(train, seed, "initialization and shuffling"),
    CHORUS_CONFIG_FIELD(train, eval_every_epochs, "0: only the final evaluation"),
    CHORUS_CONFIG_FIELD(train, eval_every_steps, "also evaluate every N steps (0: off)"),
    CHORUS_CONFIG_FIELD(train, eval_samples, "intermediate evaluations: first N test samples (0: all)"),
    CHORUS_CONFIG_FIELD(train, log_every_steps, "progress lines and metrics"),
    CHORUS_CONFIG_FIELD(train, checkpoint_every_epochs, "0: only at the end"),
    CHORUS_CONFIG_FIELD(train, slowdown, "sleep this fraction of each step's compute"),

    CHORUS_CONFIG_FIELD(loss_scale, initial, "dynamic loss scale at start"),
    CHORUS_CONFIG_FIELD(loss_scale, growth_interval, "clean steps before the scale grows"),
    CHORUS_CONFIG_FIELD(loss_scale, growth_factor, "> 1"),
    CHORUS_CONFIG_FIELD(loss_scale, backoff_factor, "in (0, 1), applied on Inf/NaN"),
    CHORUS_CONFIG_FIELD(loss_scale, min_scale, "> 0"),

    CHORUS_CONFIG_FIELD(data, dir, "Fashion-MNIST IDX files"),
    CHORUS_CONFIG_FIELD(data, train_limit, "0: all 60000"),
    CHORUS_CONFIG_FIELD(data, test_limit, "0: all 10000"),

    CHORUS_CONFIG_FIELD(cluster, listen, "control plane host:port (port 0: any free)"),
    CHORUS_CONFIG_FIELD(cluster, advertise, "empty: same as listen"),
    CHORUS_CONFIG_FIELD(cluster, bootstrap, "host:port of running members"),
    CHORUS_CONFIG_FIELD(cluster, token, "shared cluster secret (never sent)"),
    CHORUS_CONFIG_FIELD(cluster, min_nodes, "epoch 0 is fixed once this many are present"),
    CHORUS_CONFIG_FIELD(cluster, join_timeout_s, "> 0"),
    CHORUS_CONFIG_FIELD(cluster, heartbeat_interval_s, "> 0"),
    CHORUS_CONFIG_FIELD(cluster, suspect_timeout_s, "> heartbeat_interval_s"),
    CHORUS_CONFIG_FIELD(cluster, dead_timeout_s, ">= suspect_timeout_s"),
    CHORUS_CONFIG_FIELD(cluster, host_group, "empty: hostname"),
    CHORUS_CONFIG_FIELD(cluster, rank_hint, "-1: from SLURM_PROCID / OMPI_COMM_WORLD_RANK"),

    CHORUS_CONFIG_FIELD(fabric, provider, "\"tcp;ofi_rxm\" | \"net\" | \"shm\""),
    CHORUS_CONFIG_FIELD(fabric, op_timeout_s, "deadline of one data-plane wait"),
    CHORUS_CONFIG_FIELD(fabric, busy_poll_us,
                        "a wait first polls the CQ without yielding this long (us); only with a core per node"),
    CHORUS_CONFIG_FIELD(fabric, wait_spin_us, "a wait polls the CQ itself this long (us), then sleeps"),
    CHORUS_CONFIG_FIELD(fabric, progress_max_sleep_us, "longest idle sleep of the progress thread (us)"),

    CHORUS_CONFIG_FIELD(exchange, kind, "none | allreduce | gossip"),
    CHORUS_CONFIG_FIELD(exchange, algorithm,
                        "allreduce: ring | tree | halving-doubling | recursive-doubling | hierarchical | auto"),
    CHORUS_CONFIG_FIELD(exchange, bucket_kib, "allreduce: tensor-fusion bucket threshold, >= 1"),
    CHORUS_CONFIG_FIELD(exchange, fp16_wire, "allreduce: FP16 gradients on the wire (pre-divided by N)"),
    CHORUS_CONFIG_FIELD(exchange, shared_memory,
                        "allreduce: nodes of one host_group sum through a shared-memory segment "
                        "(false: through the fabric only)"),
    CHORUS_CONFIG_FIELD(exchange, on_failure, "allreduce: continue (re-form over survivors) | stop"),
    CHORUS_CONFIG_FIELD(exchange, protocol, "gossip: dpsgd | pairwise-async | push-sum | choco"),
    CHORUS_CONFIG_FIELD(exchange, period, "gossip: local steps between mixing rounds, >= 1"),
    CHORUS_CONFIG_FIELD(exchange, max_staleness, "pairwise-async: 0 = unbounded"),
    CHORUS_CONFIG_FIELD(exchange, gamma, "choco: consensus step size, in (0, 1]; 0: 0.8 for sign/int8/fp16/none, 0.2 for top-k/random-k"),
    CHORUS_CONFIG_FIELD(exchange, consensus, "end of training: allreduce | rounds | none"),
    CHORUS_CONFIG_FIELD(exchange, consensus_bound, "relative consensus distance to reach, > 0"),
    CHORUS_CONFIG_FIELD(exchange, consensus_max_rounds, ">= 1"),
    CHORUS_CONFIG_FIELD(exchange, consensus_every_steps, "distance estimate in the metrics, >= 1"),

    CHORUS_CONFIG_FIELD(exchange.compression, codec, "none | fp16 | int8 | sign | top-k | random-k"),
    CHORUS_CONFIG_FIELD(exchange.compression, ratio, "top-k / random-k: fraction kept, in (0, 1]"),
    CHORUS_CONFIG_FIELD(exchange.compression, chunk, "int8 / sign: elements per scale, >= 1"),

    CHORUS_CONFIG_FIELD(exchange.crossovers, small_tree_max_kib,
                        "auto, 4+ ranks on one host with fewer cores: the tree up to this size (KiB; 0: never; "
                        "-1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, recursive_doubling_max_kib,
                        "auto: recursive doubling up to this bucket size (KiB; -1: the provider's default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, tree_max_kib,
                        "auto: then the tree up to this size (KiB; 0: never; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, halving_doubling_min_kib,
                        "auto: halving-doubling from this size (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, halving_doubling_max_kib,
                        "auto: ... up to this size, the ring above (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, large_tree_min_kib,
                        "auto: above halving-doubling, the tree from this size instead of the ring (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, hierarchical_min_kib,
                        "auto, several hosts some shared: hierarchical from this size (KiB; -1: default)"),

    CHORUS_CONFIG_FIELD(topology, kind,
                        "ring | bidirectional-ring | torus | hypercube | exponential | "
                        "one-peer-exponential | random-regular | complete"),
    CHORUS_CONFIG_FIELD(topology, dims, "torus: extent of each dimension (empty: automatic)"),
    CHORUS_CONFIG_FIELD(topology, degree, "random-regular: neighbours per node, >= 1"),
    CHORUS_CONFIG_FIELD(topology, seed, "random-regular: graph seed"),
};

#undef CHORUS_CONFIG_FIELD

// Every table, parents before the tables nested in them (the order DescribeConfig prints).
constexpr std::string_view kSections[] = {"run",      "train",    "loss_scale",           "data",
                                          "cluster",  "fabric",   "exchange",             "exchange.compression",
                                          "exchange.crossovers", "topology"};

const FieldSpec* FindField(std::string_view section, std::string_view key) {
  for (const FieldSpec& f : kFields) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

bool IsSection(std::string_view name) {
  return std::find(std::begin(kSections), std::end(kSections), name) != std::end(kSections);
}

// ---------------------------------------------------------------------------
// Small text helpers.

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate closest to `word`, when it is close enough to be a likely typo.
std::optional<std::string> Closest(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t limit = word.size() <= 3 ? 1 : (word.size() <= 8 ? 2 : 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string FormatDouble(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  std::string s(buffer, ec == std::errc() ? end : buffer);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Trim(std::string_view s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return std::string(s.substr(begin, end - begin + 1));
}

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
    case FieldType::kString: return "a string";
    case FieldType::kBool: return "a boolean (true or false)";
    case FieldType::kInt: return "an integer";
    case FieldType::kUint64: return "an integer >= 0";
    case FieldType::kDouble: return "a number";
    case FieldType::kStringList: return "an array of strings";
    case FieldType::kIntList: return "an array of integers";
  }
  return "?";
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    if (!out.empty()) out += "\n";
    out += line;
  }
  return out;
}

// ---------------------------------------------------------------------------
// TOML tables onto a Config.

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
      for (const FieldSpec& f : kFields) {
        if (f.key == name) {
          Error(where, name, what + "; did you mean " + f.Path() + "?");
          return;
        }
      }
    }
    std::vector<std::string> sections(std::begin(kSections), std::end(kSections));
    if (auto near = Closest(name, sections)) {
      what += "; did you mean [" + *near + "]?";
    } else {
      what += "; known tables:";
      for (std::string_view section : kSections) what += " [" + std::string(section) + "]";
    }
    Error(where, name, what);
  }

  void ReportUnknownKey(const std::string& section, const std::string& key, const std::string& where) {
    std::string what = "unknown key";
    std::vector<std::string> same_section;
    for (const FieldSpec& f : kFields) {
      if (f.section == section) same_section.emplace_back(f.key);
    }
    for (std::string_view nested : kSections) {
      if (nested.starts_with(section + ".")) same_section.emplace_back(nested.substr(section.size() + 1));
    }
    if (auto near = Closest(key, same_section)) {
      what += "; did you mean " + section + "." + *near + "?";
    } else {
      for (const FieldSpec& f : kFields) {
        if (f.key == key) {
          what += "; did you mean " + f.Path() + "?";
          break;
        }
      }
    }
    Error(where, section + "." + key, what);
  }

  void ApplyValue(const FieldSpec& field, const toml::node& node, const std::string& where) {
    const std::string path = field.Path();
    void* target = field.get(*config_);
    auto type_error = [&] {
      Error(where, path, "expected " + std::string(ExpectedType(field.type)) + ", got " + DescribeNode(node));
    };
    switch (field.type) {
      case FieldType::kString: {
        const auto* s = node.as_string();
        if (s == nullptr) return type_error();
        *static_cast<std::string*>(target) = s->get();
        break;
      }
      case FieldType::kBool: {
        const auto* b = node.as_boolean();
        if (b == nullptr) return type_error();
        *static_cast<bool*>(target) = b->get();
        break;
      }
      case FieldType::kInt: {
        const auto* i = node.as_integer();
        if (i == nullptr) return type_error();
        if (i->get() < INT_MIN || i->get() > INT_MAX) {
          return Error(where, path, "expected a 32-bit integer, got " + std::to_string(i->get()));
        }
        *static_cast<int*>(target) = static_cast<int>(i->get());
        break;
      }
      case FieldType::kUint64: {
        const auto* i = node.as_integer();
        if (i == nullptr || i->get() < 0) return type_error();
        *static_cast<uint64_t*>(target) = static_cast<uint64_t>(i->get());
        break;
      }
      case FieldType::kDouble: {
        if (const auto* f = node.as_floating_point()) {
          *static_cast<double*>(target) = f->get();
        } else if (const auto* i = node.as_integer()) {
          *static_cast<double*>(target) = static_cast<double>(i->get());
        } else {
          return type_error();
        }
        break;
      }
      case FieldType::kStringList: {
        const auto* array = node.as_array();
        if (array == nullptr) return type_error();
        std::vector<std::string> items;
        bool ok = true;
        for (size_t i = 0; i < array->size(); ++i) {
          const toml::node& item = *array->get(i);
          const std::string item_path = path + "[" + std::to_string(i) + "]";
          const std::string item_where = Where(source_, item.source());
          if (const auto* s = item.as_string()) {
            items.push_back(s->get());
            config_->origins[item_path] = origin_.value_or(item_where);
          } else {
            Error(item_where, item_path, "expected a string, got " + DescribeNode(item));
            ok = false;
          }
        }
        if (!ok) return;
        *static_cast<std::vector<std::string>*>(target) = std::move(items);
        break;
      }
      case FieldType::kIntList: {
        const auto* array = node.as_array();
        if (array == nullptr) return type_error();
        std::vector<int> items;
        bool ok = true;
        for (size_t i = 0; i < array->size(); ++i) {
          const toml::node& item = *array->get(i);
          const std::string item_path = path + "[" + std::to_string(i) + "]";
          const std::string item_where = Where(source_, item.source());
          const auto* v = item.as_integer();
          if (v != nullptr && v->get() >= INT_MIN && v->get() <= INT_MAX) {
            items.push_back(static_cast<int>(v->get()));
            config_->origins[item_path] = origin_.value_or(item_where);
          } else {
            Error(item_where, item_path, "expected a 32-bit integer, got " + DescribeNode(item));
            ok = false;
          }
        }
        if (!ok) return;
        *static_cast<std::vector<int>*>(target) = std::move(items);
        break;
      }
    }
    config_->origins[path] = origin_.value_or(where);
  }

  Config* config_;
  std::string source_;
  std::optional<std::string> origin_;
  std::vector<std::string>* errors_;
};

// ---------------------------------------------------------------------------
// Validation.

class Checker {
 public:
  explicit Checker(const Config& config) : config_(config) {}

  // `key` is the key at fault; `related` another key the check involves, whose
  // origin is used when `key` itself was left at its default.
  void Fail(const std::string& key, const std::string& what, const std::string& related = "") {
    errors_.push_back(OriginOf(key, related) + ": " + key + ": " + what);
  }

  void IntAtLeast(const std::string& key, int64_t v, int64_t min) {
    if (v < min) Fail(key, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
  }
  void IntInRange(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      Fail(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + std::to_string(v));
    }
  }
  void NumberAbove(const std::string& key, double v, double min) {
    if (!std::isfinite(v) || !(v > min)) Fail(key, "expected a number > " + FormatDouble(min) + ", got " + FormatDouble(v));
  }
  void NumberAtLeast(const std::string& key, double v, double min) {
    if (!std::isfinite(v) || !(v >= min)) {
      Fail(key, "expected a number >= " + FormatDouble(min) + ", got " + FormatDouble(v));
    }
  }
  // lo <= v < hi, or lo < v < hi when `open_low`.
  void NumberBelow(const std::string& key, double v, double lo, double hi, bool open_low) {
    bool ok = std::isfinite(v) && (open_low ? v > lo : v >= lo) && v < hi;
    if (!ok) {
      Fail(key, std::string("expected a number in ") + (open_low ? "(" : "[") + FormatDouble(lo) + ", " +
                    FormatDouble(hi) + "), got " + FormatDouble(v));
    }
  }
  // 0 < v <= 1.
  void NumberInHalfOpenUnit(const std::string& key, double v) {
    if (!std::isfinite(v) || !(v > 0.0 && v <= 1.0)) Fail(key, "expected a number in (0, 1], got " + FormatDouble(v));
  }
  void OneOf(const std::string& key, const std::string& v, std::initializer_list<std::string_view> choices) {
    std::vector<std::string> names(choices.begin(), choices.end());
    if (std::find(names.begin(), names.end(), v) != names.end()) return;
    std::string what = "expected one of ";
    for (size_t i = 0; i < names.size(); ++i) what += (i ? ", " : "") + TomlQuote(names[i]);
    what += ", got " + TomlQuote(v);
    if (auto near = Closest(v, names)) what += " (did you mean " + TomlQuote(*near) + "?)";
    Fail(key, what);
  }
  // A single folder name: used as runs/<name>/<node>.
  void FolderName(const std::string& key, const std::string& v, bool allow_empty) {
    if (v.empty()) {
      if (!allow_empty) Fail(key, "expected a non-empty name, got \"\"");
      return;
    }
    bool ok = v != "." && v != ".." &&
              std::all_of(v.begin(), v.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
              });
    if (!ok) Fail(key, "expected a name of letters, digits, '-', '_' and '.', got " + TomlQuote(v));
  }
  void NonEmpty(const std::string& key, const std::string& v) {
    if (v.empty()) Fail(key, "expected a non-empty string, got \"\"");
  }
  void Address(const std::string& key, const std::string& v, bool allow_port_zero) {
    Result<HostPort> parsed = ParseHostPort(v);
    if (!parsed) {
      Fail(key, "expected host:port, got " + TomlQuote(v) + " (" + parsed.error().message() + ")");
    } else if (parsed->port == 0 && !allow_port_zero) {
      Fail(key, "expected host:port with a port in [1, 65535], got " + TomlQuote(v));
    }
  }

  Status Finish() const {
    if (errors_.empty()) return Status::Ok();
    return InvalidArgument(JoinLines(errors_));
  }

 private:
  std::string OriginOf(const std::string& key, const std::string& related) const {
    for (const std::string& k : {key, key.substr(0, key.find('[')), related}) {
      auto it = config_.origins.find(k);
      if (!k.empty() && it != config_.origins.end()) return it->second;
    }
    return config_.source.empty() ? std::string("<config>") : config_.source;
  }

  const Config& config_;
  std::vector<std::string> errors_;
};

// The first of `names` that is set and non-empty.
std::optional<std::pair<const char*, const char*>> FirstSet(const EnvLookup& getenv_fn,
                                                            std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = getenv_fn(name);
    if (value != nullptr && *value != '\0') return std::make_pair(name, value);
  }
  return std::nullopt;
}

std::string FormatValue(const FieldSpec& field, const Config& config) {
  const void* value = field.get(const_cast<Config&>(config));
  switch (field.type) {
    case FieldType::kString: return TomlQuote(*static_cast<const std::string*>(value));
    case FieldType::kBool: return *static_cast<const bool*>(value) ? "true" : "false";
    case FieldType::kInt: return std::to_string(*static_cast<const int*>(value));
    case FieldType::kUint64: return std::to_string(*static_cast<const uint64_t*>(value));
    case FieldType::kDouble: return FormatDouble(*static_cast<const double*>(value));
    case FieldType::kStringList: {
      std::string out = "[";
      for (const std::string& item : *static_cast<const std::vector<std::string>*>(value)) {
        out += (out.size() > 1 ? ", " : "") + TomlQuote(item);
      }
      return out + "]";
    }
    case FieldType::kIntList: {
      std::string out = "[";
      for (int item : *static_cast<const std::vector<int>*>(value)) {
        out += (out.size() > 1 ? ", " : "") + std::to_string(item);
      }
      return out + "]";
    }
  }
  return "";
}

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
    for (const FieldSpec& f : kFields) {
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
  if (field->type == FieldType::kString && value.front() != '"' && value.front() != '\'') {
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

Result<int64_t> ParseEnvInteger(const char* name, const char* text, int64_t min) {
  std::string_view s(text);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < min || value > INT_MAX) {
    return Err(InvalidArgument("environment variable " + std::string(name) + "=" + std::string(s) +
                               ": expected an integer >= " + std::to_string(min)));
  }
  return value;
}

Status ApplyEnvironmentHints(Config* config) {
  return ApplyEnvironmentHints(config, [](const char* name) -> const char* { return std::getenv(name); });
}

Status ApplyEnvironmentHints(Config* config, const EnvLookup& getenv_fn) {
  if (config->cluster.rank_hint == -1) {
    if (auto var = FirstSet(getenv_fn, {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})) {
      CHORUS_ASSIGN_OR_RETURN(int64_t rank, ParseEnvInteger(var->first, var->second, 0));
      config->cluster.rank_hint = static_cast<int>(rank);
      config->origins["cluster.rank_hint"] = std::string("env ") + var->first;
    }
  }
  if (!config->origins.contains("cluster.min_nodes")) {
    if (auto var = FirstSet(getenv_fn, {"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"})) {
      CHORUS_ASSIGN_OR_RETURN(int64_t size, ParseEnvInteger(var->first, var->second, 1));
      config->cluster.min_nodes = static_cast<int>(size);
      config->origins["cluster.min_nodes"] = std::string("env ") + var->first;
    }
  }
  return Status::Ok();
}

Status ValidateConfig(const Config& config) {
  Checker check(config);
  const RunConfig& run = config.run;
  check.FolderName("run.name", run.name, /*allow_empty=*/false);
  check.FolderName("run.node_name", run.node_name, /*allow_empty=*/true);
  check.NonEmpty("run.output_dir", run.output_dir);
  check.OneOf("run.log_level", run.log_level, {"trace", "debug", "info", "warn", "error", "off"});
  check.OneOf("run.progress", run.progress, {"auto", "bar", "lines", "off"});

  const TrainConfig& train = config.train;
  check.OneOf("train.model", train.model, {"mlp", "cnn", "cnn-bn"});
  check.OneOf("train.precision", train.precision, {"fp16", "fp32"});
  check.OneOf("train.optimizer", train.optimizer, {"lars", "sgd"});
  if (Result<int> device = trainer::ParseDevice(train.device); !device) {
    check.Fail("train.device", device.error().message());
  } else if (*device >= 0 && train.precision != "fp16") {
    check.Fail("train.device", "GPU nodes train in fp16 (FP32 master weights); precision \"" +
                                   train.precision + "\" is for CPU nodes",
               "train.precision");
  }
  check.IntAtLeast("train.epochs", train.epochs, 0);
  check.IntAtLeast("train.batch_size", train.batch_size, 1);
  check.NumberAbove("train.base_lr", train.base_lr, 0.0);
  check.NumberBelow("train.momentum", train.momentum, 0.0, 1.0, /*open_low=*/false);
  check.NumberAtLeast("train.weight_decay", train.weight_decay, 0.0);
  check.NumberAbove("train.lars_eta", train.lars_eta, 0.0);
  check.NumberAtLeast("train.warmup_epochs", train.warmup_epochs, 0.0);
  check.NumberAtLeast("train.lr_decay_power", train.lr_decay_power, 0.0);
  check.IntInRange("train.threads", train.threads, 1, 256);
  // TOML integers are signed 64-bit: a larger seed could not be written back.
  if (train.seed > static_cast<uint64_t>(INT64_MAX)) {
    check.Fail("train.seed", "expected an integer in [0, " + std::to_string(INT64_MAX) + "], got " +
                                 std::to_string(train.seed));
  }
  check.IntAtLeast("train.eval_every_epochs", train.eval_every_epochs, 0);
  check.IntAtLeast("train.eval_every_steps", train.eval_every_steps, 0);
  check.IntAtLeast("train.eval_samples", train.eval_samples, 0);
  check.IntAtLeast("train.log_every_steps", train.log_every_steps, 1);
  check.IntAtLeast("train.checkpoint_every_epochs", train.checkpoint_every_epochs, 0);
  check.NumberAtLeast("train.slowdown", train.slowdown, 0.0);

  const LossScaleConfig& scale = config.loss_scale;
  check.NumberAbove("loss_scale.initial", scale.initial, 0.0);
  check.IntAtLeast("loss_scale.growth_interval", scale.growth_interval, 1);
  check.NumberAbove("loss_scale.growth_factor", scale.growth_factor, 1.0);
  check.NumberBelow("loss_scale.backoff_factor", scale.backoff_factor, 0.0, 1.0, /*open_low=*/true);
  check.NumberAbove("loss_scale.min_scale", scale.min_scale, 0.0);
  if (scale.min_scale > 0 && scale.initial > 0 && scale.initial < scale.min_scale) {
    check.Fail("loss_scale.initial",
               "expected a number >= loss_scale.min_scale (" + FormatDouble(scale.min_scale) + "), got " +
                   FormatDouble(scale.initial),
               "loss_scale.min_scale");
  }

  check.NonEmpty("data.dir", config.data.dir);
  check.IntAtLeast("data.train_limit", config.data.train_limit, 0);
  check.IntAtLeast("data.test_limit", config.data.test_limit, 0);

  const ClusterConfig& cluster = config.cluster;
  check.Address("cluster.listen", cluster.listen, /*allow_port_zero=*/true);
  if (!cluster.advertise.empty()) check.Address("cluster.advertise", cluster.advertise, false);
  for (size_t i = 0; i < cluster.bootstrap.size(); ++i) {
    check.Address("cluster.bootstrap[" + std::to_string(i) + "]", cluster.bootstrap[i], false);
  }
  check.IntAtLeast("cluster.min_nodes", cluster.min_nodes, 1);
  check.NumberAbove("cluster.join_timeout_s", cluster.join_timeout_s, 0.0);
  check.NumberAbove("cluster.heartbeat_interval_s", cluster.heartbeat_interval_s, 0.0);
  check.NumberAbove("cluster.suspect_timeout_s", cluster.suspect_timeout_s, 0.0);
  check.NumberAbove("cluster.dead_timeout_s", cluster.dead_timeout_s, 0.0);
  if (cluster.heartbeat_interval_s > 0 && cluster.suspect_timeout_s > 0 &&
      !(cluster.suspect_timeout_s > cluster.heartbeat_interval_s)) {
    check.Fail("cluster.suspect_timeout_s",
               "expected a number > cluster.heartbeat_interval_s (" +
                   FormatDouble(cluster.heartbeat_interval_s) + "), got " +
                   FormatDouble(cluster.suspect_timeout_s),
               "cluster.heartbeat_interval_s");
  }
  if (cluster.suspect_timeout_s > 0 && cluster.dead_timeout_s > 0 &&
      cluster.dead_timeout_s < cluster.suspect_timeout_s) {
    check.Fail("cluster.dead_timeout_s",
               "expected a number >= cluster.suspect_timeout_s (" + FormatDouble(cluster.suspect_timeout_s) +
                   "), got " + FormatDouble(cluster.dead_timeout_s),
               "cluster.suspect_timeout_s");
  }
  check.IntAtLeast("cluster.rank_hint", cluster.rank_hint, -1);

  check.OneOf("fabric.provider", config.fabric.provider, {"tcp;ofi_rxm", "net", "shm"});
  check.NumberAbove("fabric.op_timeout_s", config.fabric.op_timeout_s, 0.0);
  check.IntAtLeast("fabric.busy_poll_us", config.fabric.busy_poll_us, 0);
  check.IntAtLeast("fabric.wait_spin_us", config.fabric.wait_spin_us, 0);
  check.IntAtLeast("fabric.progress_max_sleep_us", config.fabric.progress_max_sleep_us, 1);

  // Every [exchange] key is checked whatever the kind, so a typo in a setting of
  // the kind not chosen today does not wait until the kind is switched.
  const ExchangeConfig& exchange = config.exchange;
  check.OneOf("exchange.kind", exchange.kind, {"none", "allreduce", "gossip"});
  check.OneOf("exchange.algorithm", exchange.algorithm,
              {"ring", "tree", "halving-doubling", "recursive-doubling", "hierarchical", "auto"});
  check.IntAtLeast("exchange.bucket_kib", exchange.bucket_kib, 1);
  check.OneOf("exchange.on_failure", exchange.on_failure, {"continue", "stop"});
  check.OneOf("exchange.protocol", exchange.protocol, {"dpsgd", "pairwise-async", "push-sum", "choco"});
  check.IntAtLeast("exchange.period", exchange.period, 1);
  check.IntAtLeast("exchange.max_staleness", exchange.max_staleness, 0);
  if (exchange.gamma != 0.0) check.NumberInHalfOpenUnit("exchange.gamma", exchange.gamma);
  check.OneOf("exchange.consensus", exchange.consensus, {"allreduce", "rounds", "none"});
  check.NumberAbove("exchange.consensus_bound", exchange.consensus_bound, 0.0);
  check.IntAtLeast("exchange.consensus_max_rounds", exchange.consensus_max_rounds, 1);
  check.IntAtLeast("exchange.consensus_every_steps", exchange.consensus_every_steps, 1);
  // A lossy codec without CHOCO's error feedback is allowed: that is the plain lossy exchange.
  const CompressionConfig& compression = exchange.compression;
  check.OneOf("exchange.compression.codec", compression.codec, {"none", "fp16", "int8", "sign", "top-k", "random-k"});
  check.NumberInHalfOpenUnit("exchange.compression.ratio", compression.ratio);
  check.IntAtLeast("exchange.compression.chunk", compression.chunk, 1);
  const CrossoversConfig& x = exchange.crossovers;
  check.IntAtLeast("exchange.crossovers.small_tree_max_kib", x.small_tree_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.recursive_doubling_max_kib", x.recursive_doubling_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.tree_max_kib", x.tree_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.halving_doubling_min_kib", x.halving_doubling_min_kib, -1);
  check.IntAtLeast("exchange.crossovers.halving_doubling_max_kib", x.halving_doubling_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.large_tree_min_kib", x.large_tree_min_kib, -1);
  check.IntAtLeast("exchange.crossovers.hierarchical_min_kib", x.hierarchical_min_kib, -1);

  const TopologyConfig& topology = config.topology;
  check.OneOf("topology.kind", topology.kind,
              {"ring", "bidirectional-ring", "torus", "hypercube", "exponential", "one-peer-exponential",
               "random-regular", "complete"});
  for (size_t i = 0; i < topology.dims.size(); ++i) {
    check.IntAtLeast("topology.dims[" + std::to_string(i) + "]", topology.dims[i], 1);
  }
  check.IntAtLeast("topology.degree", topology.degree, 1);
  if (topology.seed > static_cast<uint64_t>(INT64_MAX)) {
    check.Fail("topology.seed", "expected an integer in [0, " + std::to_string(INT64_MAX) + "], got " +
                                    std::to_string(topology.seed));
  }
  return check.Finish();
}

std::string DescribeConfig(const Config& config) {
  std::string out = "# Resolved settings of " + config.source + " (every key, defaults included).\n";
  for (std::string_view section : kSections) {
    std::vector<std::pair<std::string, std::string_view>> lines;  // "key = value", help
    size_t width = 0;
    for (const FieldSpec& f : kFields) {
      if (f.section != section) continue;
      lines.emplace_back(std::string(f.key) + " = " + FormatValue(f, config), f.help);
      width = std::max(width, lines.back().first.size());
    }
    out += "\n[" + std::string(section) + "]\n";
    for (const auto& [line, help] : lines) {
      out += line + std::string(width - line.size() + 2, ' ') + "# " + std::string(help) + "\n";
    }
  }
  return out;
}

// Outside [exchange] and [topology], the settings that fix what a step
// computes and in what order the data comes: the model and its buffers, the
// optimizer and its schedule (epochs and the training set's size set the
// number of steps), the seed (initial weights, and the shuffle that splits the
// data between the nodes). Per node: batch size, device, threads, slowdown,
// evaluation, logging and checkpoints.
constexpr std::string_view kSharedTrainingSettings[] = {
    "train.model",        "train.precision",     "train.optimizer",      "train.epochs",
    "train.base_lr",      "train.momentum",      "train.weight_decay",   "train.lars_eta",
    "train.warmup_epochs", "train.lr_decay_power", "train.seed",         "data.train_limit"};

std::string SharedSettingsText(const Config& config) {
  std::string out;
  for (const FieldSpec& f : kFields) {
    if (f.section == "topology" || f.section == "exchange" || f.section.starts_with("exchange.") ||
        std::ranges::find(kSharedTrainingSettings, f.Path()) != std::end(kSharedTrainingSettings)) {
      out += f.Path() + " = " + FormatValue(f, config) + "\n";
    }
  }
  return out;
}

std::vector<std::string> ConfigKeyPaths() {
  std::vector<std::string> paths;
  for (const FieldSpec& f : kFields) paths.push_back(f.Path());
  return paths;
}

std::string TomlQuote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace chorus::node
