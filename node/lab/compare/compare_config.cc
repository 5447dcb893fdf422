// Parsing the [compare] table (see compare_config.h). toml++ exceptions stop here.
#include "node/lab/compare/compare_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

#include "common/files.h"
#include "node/config/config_parse.h"
#include "node/config/units.h"

namespace chorus::node {
namespace {

std::string Where(const std::string& path, const toml::source_region& region) {
  return path + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

bool ValidMethodName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

// Collects the errors of one file, one per line in the final message.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  void Error(const toml::node& node, std::string_view key, const std::string& what) {
    errors_.push_back(Where(path_, node.source()) + ": compare." + std::string(key) + ": " + what);
  }
  void Error(const std::string& what) { errors_.push_back(path_ + ": " + what); }
  void ErrorAt(const toml::source_region& region, std::string_view key, const std::string& what) {
    errors_.push_back(Where(path_, region) + ": compare." + std::string(key) + ": " + what);
  }

  std::optional<std::string> String(const toml::node& node, std::string_view key) {
    if (const auto* s = node.as_string()) return s->get();
    Error(node, key, "expected a string");
    return std::nullopt;
  }

  Status Finish() const {
    if (errors_.empty()) return Status::Ok();
    std::string message;
    for (const std::string& e : errors_) message += (message.empty() ? "" : "\n") + e;
    return InvalidArgument(message);
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> errors_;
};

void ParseLink(const toml::node& node, Checker& check, LinkSpec* link) {
  const toml::table* t = node.as_table();
  if (t == nullptr) return check.Error(node, "link", "expected a table { bandwidth = \"1gbit\", latency = \"1ms\" }");
  link->enabled = true;
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    if (key == "bandwidth") {
      if (auto s = check.String(v, "link.bandwidth")) {
        link->bandwidth = *s;
        Result<double> rate = ParseBandwidth(*s);
        if (rate) {
          link->bytes_per_s = *rate;
        } else {
          check.Error(v, "link.bandwidth", rate.error().message());
        }
      }
    } else if (key == "latency") {
      if (auto s = check.String(v, "link.latency")) {
        link->latency = *s;
        Result<double> seconds = ParseDuration(*s);
        if (seconds) {
          link->latency_s = *seconds;
        } else {
          check.Error(v, "link.latency", seconds.error().message());
        }
      }
    } else {
      check.Error(v, "link." + key, "unknown key; expected bandwidth or latency");
    }
  }
  if (link->bandwidth.empty()) check.Error(node, "link", "needs a bandwidth, e.g. bandwidth = \"1gbit\"");
}

// A table { node = N, <number> = X } of one node of the cluster (the
// straggler, the late joiner): the node, at least `min_node`, and a number
// that `number_ok` accepts; errors name `name`.<key> and say what is expected.
struct NodeTable {
  std::string_view name;
  std::string_view example;       // "{ node = 3, slowdown = 2.0 }"
  int min_node;
  std::string_view node_expect;
  std::string_view number_key;
  bool (*number_ok)(double);
  std::string_view number_expect;
};

void ParseNodeTable(const toml::node& node, Checker& check, const NodeTable& spec, int* node_out, double* number_out) {
  const std::string name(spec.name);
  const toml::table* t = node.as_table();
  if (t == nullptr) return check.Error(node, name, "expected a table " + std::string(spec.example));
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    if (key == "node") {
      const auto* i = v.as_integer();
      if (i == nullptr || i->get() < spec.min_node) {
        check.Error(v, name + ".node", std::string(spec.node_expect));
      } else {
        *node_out = static_cast<int>(i->get());
      }
    } else if (key == spec.number_key) {
      std::optional<double> d = v.value<double>();
      if (!d || !spec.number_ok(*d)) {
        check.Error(v, name + "." + key, std::string(spec.number_expect));
      } else {
        *number_out = *d;
      }
    } else {
      check.Error(v, name + "." + key, "unknown key; expected node or " + std::string(spec.number_key));
    }
  }
}

void ParseStraggler(const toml::node& node, Checker& check, CompareConfig* config) {
  config->slow_node = 0;
  config->slowdown = 2.0;
  ParseNodeTable(node, check,
                 {"straggler", "{ node = 3, slowdown = 2.0 }", 0, "expected a node index >= 0", "slowdown",
                  [](double d) { return d > 0.0; }, "expected a number > 0 (2.0: sleep twice the compute, 3x slower)"},
                 &config->slow_node, &config->slowdown);
}

// A list with one entry per node (`speeds`, `batch_sizes`): each entry read by
// `read` (nullopt: not a number of the kind) and accepted by `ok`, else an
// error at the entry saying `expect`. The length is checked against the nodes
// once the whole table is read (CheckProfiles).
template <typename T>
void ParseNodeList(const toml::node& node, std::string_view key, Checker& check,
                   std::optional<T> (*read)(const toml::node&), bool (*ok)(T), std::string_view expect,
                   std::vector<T>* out) {
  const toml::array* a = node.as_array();
  if (a == nullptr || a->empty()) return check.Error(node, key, "expected a list with one entry per node");
  out->clear();
  for (const toml::node& item : *a) {
    std::optional<T> value = read(item);
    if (!value || !ok(*value)) {
      check.Error(item, key, std::string(expect));
    } else {
      out->push_back(*value);
    }
  }
}

void ParseSpeeds(const toml::node& node, Checker& check, CompareConfig* config) {
  ParseNodeList<double>(
      node, "speeds", check, [](const toml::node& n) { return n.value<double>(); },
      [](double d) { return d > 0.0 && d <= 1.0; },
      "expected a speed in (0, 1] (1: a full node; 0.5: half as fast)", &config->speeds);
}

void ParseBatchSizes(const toml::node& node, Checker& check, CompareConfig* config) {
  ParseNodeList<int>(
      node, "batch_sizes", check,
      [](const toml::node& n) -> std::optional<int> {
        const auto* i = n.as_integer();
        if (i == nullptr || i->get() > (int64_t{1} << 30)) return std::nullopt;
        return static_cast<int>(i->get());
      },
      [](int b) { return b >= 1; }, "expected a batch size, an integer >= 1", &config->batch_sizes);
}

void ParseLateJoiner(const toml::node& node, Checker& check, CompareConfig* config) {
  config->late_node = 1;
  config->late_after_s = 5.0;
  ParseNodeTable(node, check,
                 {"late_joiner", "{ node = 3, after_s = 5.0 }", 1,
                  "expected a node index >= 1 (node0 holds the bootstrap port)", "after_s",
                  [](double d) { return std::isfinite(d) && d >= 0.0; },
                  "expected seconds >= 0 after the other nodes start"},
                 &config->late_node, &config->late_after_s);
}

void ParseSites(const toml::node& node, Checker& check, CompareConfig* config) {
  const toml::array* a = node.as_array();
  if (a == nullptr || a->empty()) return check.Error(node, "sites", "expected a list of sites, each a list of nodes");
  config->sites.clear();
  for (const toml::node& site : *a) {
    const toml::array* nodes = site.as_array();
    if (nodes == nullptr || nodes->empty()) {
      check.Error(site, "sites", "expected a site as a non-empty list of node indices, e.g. [0, 1, 2, 3]");
      continue;
    }
    std::vector<int>& out = config->sites.emplace_back();
    for (const toml::node& item : *nodes) {
      const auto* i = item.as_integer();
      if (i == nullptr || i->get() < 0 || i->get() > 1000) {
        check.Error(item, "sites", "expected a node index >= 0");
      } else {
        out.push_back(static_cast<int>(i->get()));
      }
    }
  }
}

// "100mbit 50ms": a bandwidth and an optional one-way latency.
void ParseSiteLink(const toml::node& node, Checker& check, LinkSpec* link) {
  std::optional<std::string> text = check.String(node, "site_link");
  if (!text) return;
  Result<LinkText> parsed = ParseLinkText(*text);
  if (!parsed) return check.Error(node, "site_link", parsed.error().message());
  link->enabled = true;
  link->bytes_per_s = parsed->bytes_per_s;
  link->latency_s = parsed->latency_s;
  const size_t space = text->find_first_of(" \t");
  link->bandwidth = text->substr(0, space);
  link->latency = space == std::string::npos ? "" : text->substr(text->find_first_not_of(" \t", space));
}

void ParseCustomMethod(const toml::node& node, Checker& check, std::vector<CompareMethod>* out) {
  const toml::table* t = node.as_table();
  if (t == nullptr) return check.Error(node, "method", "expected a table [[compare.method]]");
  CompareMethod m;
  m.family = "gossip";
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    if (key == "name" || key == "label" || key == "family") {
      auto s = check.String(v, "method." + key);
      if (!s) continue;
      if (key == "name") m.name = *s;
      if (key == "label") m.label = *s;
      if (key == "family") {
        m.family = *s;
        if (m.family != "allreduce" && m.family != "gossip" && m.family != "local-sgd" &&
            m.family != "low-communication") {
          check.Error(v, "method.family",
                      "expected allreduce | gossip | local-sgd | low-communication, got \"" + m.family + "\"");
        }
      }
    } else if (key == "set") {
      const toml::array* a = v.as_array();
      if (a == nullptr) {
        check.Error(v, "method.set", "expected a list of \"section.key=value\" strings");
        continue;
      }
      for (const toml::node& item : *a) {
        auto s = check.String(item, "method.set");
        if (s && s->find('=') == std::string::npos) {
          check.Error(item, "method.set", "expected \"section.key=value\", got \"" + *s + "\"");
        } else if (s) {
          m.overrides.push_back(*s);
        }
      }
    } else {
      check.Error(v, "method." + key, "unknown key; expected name, label, family or set");
    }
  }
  if (!ValidMethodName(m.name)) {
    return check.Error(node, "method.name",
                       "expected a name of lower-case letters, digits and '-', got \"" + m.name + "\"");
  }
  if (m.label.empty()) m.label = m.name;
  out->push_back(std::move(m));
}

// What the [compare] table says about which methods run: the names of
// `methods = [...]` and the [[compare.method]] definitions.
struct MethodChoice {
  std::vector<std::string> names;
  bool names_given = false;  // `methods` is present (maybe empty)
  std::vector<CompareMethod> custom;
};

// Where the keys that only the whole table can check were written, and how
// many entries the lists have as written (wrong entries included).
struct ListPlace {
  toml::source_region region;
  size_t entries = 0;
};
struct KeyPlaces {
  std::optional<toml::source_region> straggler, sites;
  std::optional<ListPlace> speeds, batch_sizes;
};

ListPlace PlaceOfList(const toml::node& v) {
  const toml::array* a = v.as_array();
  return {v.source(), a != nullptr ? a->size() : 0};
}

// The whole file as TOML; its syntax errors name the file, line and column,
// and a file that cannot be read says why (toml++ says only that it could not).
Result<toml::table> ParseTomlFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return Err(InvalidArgument(path + ": cannot read comparison file: " + text.error().message()));
  try {
    return toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    return Err(InvalidArgument(Where(path, e.source()) + ": " + std::string(e.description())));
  } catch (const std::exception& e) {
    return Err(InvalidArgument(path + ": " + e.what()));
  }
}

// One key of the [compare] table: only those of CompareKeys(), so that the
// list the docs are checked against is the one the parser accepts.
void ParseCompareKey(const std::string& key, const toml::node& v, Checker& check, CompareConfig* config,
                     MethodChoice* choice, KeyPlaces* places) {
  const std::vector<std::string>& keys = CompareKeys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    std::string expected;
    for (size_t i = 0; i < keys.size(); ++i) expected += (i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ") + keys[i];
    check.Error(v, key, "unknown key; expected " + expected);
    return;
  }
  if (key == "name") {
    if (auto s = check.String(v, key)) {
      config->name = *s;
      if (!ValidMethodName(config->name)) check.Error(v, key, "expected lower-case letters, digits and '-'");
    }
  } else if (key == "nodes") {
    const auto* i = v.as_integer();
    if (i == nullptr || i->get() < 1 || i->get() > 64) {
      check.Error(v, key, "expected an integer in 1..64");
    } else {
      config->nodes = static_cast<int>(i->get());
    }
  } else if (key == "target_accuracy") {
    std::optional<double> d = v.value<double>();
    if (!d || *d <= 0.0 || *d > 1.0) {
      check.Error(v, key, "expected a number in (0, 1]");
    } else {
      config->target_accuracy = *d;
    }
  } else if (key == "single_node_baseline") {
    const auto* b = v.as_boolean();
    if (b == nullptr) {
      check.Error(v, key, "expected true or false");
    } else {
      config->single_node_baseline = b->get();
    }
  } else if (key == "methods") {
    choice->names_given = true;
    const toml::array* a = v.as_array();
    if (a == nullptr) return check.Error(v, key, "expected a list of method names");
    for (const toml::node& item : *a) {
      if (auto s = check.String(item, key)) choice->names.push_back(*s);
    }
  } else if (key == "method") {
    const toml::array* a = v.as_array();
    if (a == nullptr) return check.Error(v, key, "expected an array of tables [[compare.method]]");
    for (const toml::node& item : *a) ParseCustomMethod(item, check, &choice->custom);
  } else if (key == "link") {
    ParseLink(v, check, &config->link);
  } else if (key == "straggler") {
    places->straggler = v.source();
    ParseStraggler(v, check, config);
  } else if (key == "speeds") {
    places->speeds = PlaceOfList(v);
    ParseSpeeds(v, check, config);
  } else if (key == "batch_sizes") {
    places->batch_sizes = PlaceOfList(v);
    ParseBatchSizes(v, check, config);
  } else if (key == "late_joiner") {
    ParseLateJoiner(v, check, config);
  } else if (key == "sites") {
    places->sites = v.source();
    ParseSites(v, check, config);
  } else if (key == "site_link") {
    ParseSiteLink(v, check, &config->site_link);
  } else {
    check.Error(v, key, "no parser for this key");  // every key of CompareKeys() has a branch above
  }
}

// The [compare] table of `root`, if any, into `config` and `choice`; fails
// only when `compare` is not a table (the other errors go to `check`).
Status ParseCompareTable(const toml::table& root, Checker& check, CompareConfig* config, MethodChoice* choice,
                         KeyPlaces* places) {
  const toml::node* node = root.get(kCompareTable);
  if (node == nullptr) return Status::Ok();
  const toml::table* table = node->as_table();
  if (table == nullptr) return InvalidArgument(Where(check.path(), node->source()) + ": compare: expected a table");
  for (auto&& [k, v] : *table) ParseCompareKey(std::string(k.str()), v, check, config, choice, places);
  return Status::Ok();
}

// The methods to run, in order: the listed ones (the default matrix when
// neither `methods` nor [[compare.method]] is given), then the custom ones not
// listed.
void ResolveMethods(MethodChoice choice, Checker& check, CompareConfig* config) {
  if (!choice.names_given && choice.custom.empty()) choice.names = DefaultMethodNames();
  for (const std::string& name : choice.names) {
    const CompareMethod* method = FindMethod(choice.custom, name);
    if (method == nullptr) {
      std::string known;
      for (const CompareMethod& m : BuiltinMethods()) known += " " + m.name;
      check.Error("compare.methods: unknown method \"" + name + "\"; built-in:" + known +
                  " (or define it with [[compare.method]])");
      continue;
    }
    config->methods.push_back(*method);
  }
  // Custom methods not named in `methods` run after the listed ones.
  for (const CompareMethod& m : choice.custom) {
    if (std::find(choice.names.begin(), choice.names.end(), m.name) == choice.names.end()) {
      config->methods.push_back(m);
    }
  }
}

// What only the whole table can tell: methods listed twice, none, a straggler
// or late joiner past the nodes.
void CheckWholeConfig(const CompareConfig& config, Checker& check) {
  for (size_t i = 0; i < config.methods.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (config.methods[i].name == config.methods[j].name) {
        check.Error("compare: method \"" + config.methods[i].name + "\" is listed twice");
      }
    }
  }
  if (config.methods.empty()) check.Error("compare: no methods to run");
  if (config.slow_node >= config.nodes) {
    check.Error("compare.straggler.node: " + std::to_string(config.slow_node) + " is not below compare.nodes = " +
                std::to_string(config.nodes));
  }
  if (config.late_node >= config.nodes) {
    check.Error("compare.late_joiner.node: " + std::to_string(config.late_node) +
                " is not below compare.nodes = " + std::to_string(config.nodes));
  }
}

// Sites against the nodes: each node in exactly one site, two sites or more,
// a link inside them and one between them.
void CheckSites(const CompareConfig& config, const toml::source_region& where, Checker& check) {
  std::vector<int> count(static_cast<size_t>(config.nodes), 0);
  for (const std::vector<int>& site : config.sites) {
    for (int i : site) {
      if (i >= config.nodes) {
        check.ErrorAt(where, "sites", "node " + std::to_string(i) + " is not below compare.nodes = " +
                                          std::to_string(config.nodes));
      } else {
        ++count[static_cast<size_t>(i)];
      }
    }
  }
  for (int i = 0; i < config.nodes; ++i) {
    const int c = count[static_cast<size_t>(i)];
    if (c != 1) {
      check.ErrorAt(where, "sites", "node " + std::to_string(i) + (c == 0 ? " is in no site" : " is in " +
                                    std::to_string(c) + " sites") + " (every node in exactly one)");
    }
  }
  if (config.sites.size() < 2) check.ErrorAt(where, "sites", "needs two sites or more");
  if (!config.link.enabled) {
    check.ErrorAt(where, "sites", "needs link = { bandwidth = ..., latency = ... }: the link inside a site");
  }
  if (!config.site_link.enabled) {
    check.ErrorAt(where, "sites", "needs site_link = \"<bandwidth> [<latency>]\": the link between sites");
  }
}

// The profiles against the nodes: one entry per node, and a straggler or
// speeds, not both (the straggler is the speeds profile with one slow node).
void CheckProfiles(const CompareConfig& config, const KeyPlaces& places, Checker& check) {
  auto length = [&](const std::optional<ListPlace>& place, std::string_view key) {
    if (place && place->entries > 0 && place->entries != static_cast<size_t>(config.nodes)) {
      check.ErrorAt(place->region, key,
                    "lists " + std::to_string(place->entries) + " nodes, compare.nodes is " +
                        std::to_string(config.nodes) + " (one entry per node)");
    }
  };
  length(places.speeds, "speeds");
  if (places.sites) CheckSites(config, *places.sites, check);
  length(places.batch_sizes, "batch_sizes");
  if (places.straggler && places.speeds) {
    check.ErrorAt(places.speeds->region, "speeds",
                  "give either straggler or speeds, not both (straggler = { node = 1, slowdown = 2.0 } is "
                  "speeds with node 1 at 1/3)");
  }
}

}  // namespace

std::vector<std::pair<int, std::string>> ProfileNodeSettings(const CompareConfig& config) {
  std::vector<std::pair<int, std::string>> out;
  auto slowdown = [&](int node, double value) {
    char text[64];
    std::snprintf(text, sizeof(text), "train.slowdown=%.17g", value);
    out.emplace_back(node, text);
  };
  if (config.slow_node >= 0) slowdown(config.slow_node, config.slowdown);
  for (size_t i = 0; i < config.speeds.size(); ++i) {
    if (config.speeds[i] < 1.0) slowdown(static_cast<int>(i), 1.0 / config.speeds[i] - 1.0);
  }
  for (size_t i = 0; i < config.batch_sizes.size(); ++i) {
    out.emplace_back(static_cast<int>(i), "train.batch_size=" + std::to_string(config.batch_sizes[i]));
  }
  return out;
}

int CompareGlobalBatch(const CompareConfig& config, int batch_size) {
  if (config.batch_sizes.empty()) return batch_size * config.nodes;
  int sum = 0;
  for (int b : config.batch_sizes) sum += b;
  return sum;
}

std::vector<int> SiteOfNode(const CompareConfig& config) {
  if (config.sites.empty()) return {};
  std::vector<int> site(static_cast<size_t>(config.nodes), 0);
  for (size_t s = 0; s < config.sites.size(); ++s) {
    for (int i : config.sites[s]) {
      if (i >= 0 && i < config.nodes) site[static_cast<size_t>(i)] = static_cast<int>(s);
    }
  }
  return site;
}

const std::vector<std::string>& CompareKeys() {
  static const std::vector<std::string> keys = {"name",   "nodes", "target_accuracy", "single_node_baseline",
                                                "methods", "method", "link", "straggler",
                                                "speeds", "batch_sizes", "late_joiner", "sites", "site_link"};
  return keys;
}

namespace {

// The gossip step's corrections and the LARS norms, between streaming and
// sparse DiLoCo in the list.
std::vector<CompareMethod> BuiltinGossipCorrectionMethods() {
  return {
    {"dpsgd-qgm-ring", "D-PSGD ring, quasi-global momentum, global-batch LARS norm", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=ring",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=global-batch"}},
    {"dpsgd-qgm-one-peer-exp", "D-PSGD one-peer exp., quasi-global momentum, global-batch LARS norm", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=global-batch"}},
    {"d2-ring", "D2 ring", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=ring", "exchange.correction=d2"}},
    {"gossip-pga-ring", "Gossip-PGA ring (exact average every 16)", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=ring", "exchange.global_average_every=16"}},
    {"dpsgd-cc-ring", "D-PSGD ring, consensus control", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=ring", "exchange.consensus_control=0.01"}},
    // At 64 simulated nodes within 0.3 pp of the all-reduce, where the
    // same without consensus control lost 1.75 (docs/performance.md,
    // "64 and 128 nodes, with more mixing where it is needed").
    {"dpsgd-qgm-cc-one-peer-exp",
     "D-PSGD one-peer exp., quasi-global momentum, global-batch LARS norm, consensus control", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=global-batch", "exchange.consensus_control=0.02",
      "exchange.consensus_control_every=5"}},
    // The same with the global batch's norm from the peers' gradients:
    // within 1 pp of the all-reduce from 16 to 128 simulated nodes
    // (docs/performance.md, "LARS's norm from the peers' gradients").
    {"dpsgd-qgm-cc-peer-norm-one-peer-exp",
     "D-PSGD one-peer exp., quasi-global momentum, peer LARS norm, consensus control", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=peer", "exchange.consensus_control=0.02",
      "exchange.consensus_control_every=5"}},
    // The norm of the step's mean gradient, from sketches averaged exactly
    // along the graph: the all-reduce's accuracy on the 8-node CNN
    // (docs/performance.md, "The mean gradient's norm from averaged sketches").
    {"dpsgd-qgm-mean-norm-one-peer-exp", "D-PSGD one-peer exp., quasi-global momentum, mean-gradient LARS norm",
     "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=mean-sketch"}},
    // The peer-norm recipe with FP16 messages, at most two mixing rounds a
    // step: at 32 and 64 simulated nodes (with train.lars_eta 0.02) within
    // 0.3 pp of the all-reduce in under half its time to target
    // (docs/performance.md, "FP16 gossip messages").
    {"dpsgd-qgm-cc-peer-norm-fp16-one-peer-exp",
     "D-PSGD one-peer exp., quasi-global momentum, peer LARS norm, consensus control, FP16 messages", "gossip",
     {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential",
      "exchange.gossip_momentum=quasi-global", "train.lars_norm=peer", "exchange.consensus_control=0.05",
      "exchange.consensus_control_every=5", "exchange.consensus_control_max_rounds=2",
      "exchange.compression.codec=fp16"}},
  };
}

// The methods for sites (compare.sites), after the others.
std::vector<CompareMethod> BuiltinSiteMethods() {
  return {
    // Sites (compare.sites): the ring in rank order, for the link-aware
    // ring's gain when ranks alternate between sites; and two levels.
    {"ring-allreduce-rank-order", "ring all-reduce in rank order", "allreduce",
     {"exchange.kind=allreduce", "exchange.algorithm=ring", "exchange.link_aware=false"}},
    {"two-level-diloco", "two levels: all-reduce in sites, DiLoCo across (H=64)", "low-communication",
     {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
      "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=64",
      "exchange.outer.inner=site"}},
    {"two-level-gossip-diloco", "two levels: one-peer gossip in sites, DiLoCo across (H=64)", "low-communication",
     {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
      "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=64",
      "exchange.outer.inner=site-gossip", "topology.kind=one-peer-exponential"}},
  };
}

}  // namespace

const std::vector<CompareMethod>& BuiltinMethods() {
  static const std::vector<CompareMethod> methods = [] {
    std::vector<CompareMethod> all = {
        // The host's shared memory off: a comparison's nodes stand for separate
        // machines, and an all-reduce through it would send no bytes the
        // table could count against the others'.
        {"allreduce", "all-reduce (auto)", "allreduce",
         {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.shared_memory=false"}},
        {"tree-allreduce", "tree all-reduce", "allreduce",
         {"exchange.kind=allreduce", "exchange.algorithm=tree"}},
        {"dpsgd-ring", "D-PSGD ring", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=ring"}},
        {"dpsgd-one-peer-exp", "D-PSGD one-peer exp.", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=one-peer-exponential"}},
        {"pairwise-async", "async pairwise gossip", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=pairwise-async", "topology.kind=ring", "train.stop=samples"}},
        {"choco-sign", "CHOCO sign", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=choco", "exchange.compression.codec=sign",
          "topology.kind=ring"}},
        {"local-sgd", "local SGD (H=8)", "local-sgd",
         {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=complete", "exchange.period=8"}},
        {"diloco", "DiLoCo (H=10)", "low-communication",
         {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
          "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=10"}},
        // H = 5, not DiLoCo's 10: a random pair's average mixes slowly, and at
        // 64-128 nodes the replicas drifted apart between syncs
        // (docs/performance.md, "NoLoCo and streaming DiLoCo at 128 nodes").
        {"noloco", "NoLoCo (H=5, random pairs)", "low-communication",
         {"exchange.kind=gossip", "exchange.outer.optimizer=nesterov", "exchange.outer.peers=random",
          "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=5"}},
        {"ring-allreduce", "ring all-reduce", "allreduce",
         {"exchange.kind=allreduce", "exchange.algorithm=ring"}},
        {"halving-doubling-allreduce", "halving-doubling all-reduce", "allreduce",
         {"exchange.kind=allreduce", "exchange.algorithm=halving-doubling"}},
        {"balanced-allreduce", "load-balanced all-reduce", "allreduce",
         {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.shared_memory=false", "train.balance=time"}},
        {"push-sum-one-peer-exp", "push-sum one-peer exp.", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=push-sum", "topology.kind=one-peer-exponential"}},
        {"choco-topk", "CHOCO top-1%", "gossip",
         {"exchange.kind=gossip", "exchange.protocol=choco", "exchange.compression.codec=top-k",
          "exchange.compression.ratio=0.01", "topology.kind=ring"}},
        {"streaming-diloco", "streaming DiLoCo (H=16, 4 fragments)", "low-communication",
         {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
          "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=16",
          "exchange.outer.fragments=4", "exchange.outer.delay=2", "exchange.outer.local_mix=0"}},
        {"balanced-diloco", "load-balanced DiLoCo (H=10)", "low-communication",
         {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
          "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=10", "train.balance=time"}},
    };
    for (CompareMethod& m : BuiltinGossipCorrectionMethods()) all.push_back(std::move(m));
    all.push_back({"sparse-diloco", "sparse DiLoCo (H=5, top-2% 8-bit)", "low-communication",
                   {"exchange.kind=allreduce", "exchange.algorithm=auto", "exchange.outer.optimizer=nesterov",
                    "exchange.outer.lr=0.7", "exchange.outer.momentum=0.5", "exchange.outer.period=5",
                    "exchange.compression.codec=top-k", "exchange.compression.ratio=0.02",
                    "exchange.compression.value_bits=8"}});
    for (CompareMethod& m : BuiltinSiteMethods()) all.push_back(std::move(m));
    return all;
  }();
  return methods;
}

std::vector<std::string> DefaultMethodNames() {
  std::vector<std::string> names;
  for (size_t i = 0; i < 9; ++i) names.push_back(BuiltinMethods()[i].name);
  // The decentralized recipe that keeps up with the all-reduce, beside the plain graphs.
  names.insert(names.begin() + 4, "dpsgd-qgm-mean-norm-one-peer-exp");
  return names;
}

const CompareMethod* FindMethod(const std::vector<CompareMethod>& defined, std::string_view name) {
  auto named = [&](const CompareMethod& m) { return m.name == name; };
  if (auto it = std::find_if(defined.begin(), defined.end(), named); it != defined.end()) return &*it;
  const std::vector<CompareMethod>& builtin = BuiltinMethods();
  if (auto it = std::find_if(builtin.begin(), builtin.end(), named); it != builtin.end()) return &*it;
  return nullptr;
}

Result<CompareConfig> ParseCompareFile(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path));
  CompareConfig config;
  config.source = path;
  Checker check(path);
  MethodChoice choice;
  KeyPlaces places;
  CHORUS_RETURN_IF_ERROR(ParseCompareTable(root, check, &config, &choice, &places));
  ResolveMethods(std::move(choice), check, &config);
  CheckWholeConfig(config, check);
  CheckProfiles(config, places, check);
  CHORUS_RETURN_IF_ERROR(check.Finish());
  return config;
}

}  // namespace chorus::node
