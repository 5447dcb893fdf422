// Running a comparison (see compare.h): validate every method's config first,
// then launch the methods one by one and write compare.json after each, so a
// comparison cut short still has a report of what ran.
#include "node/lab/compare/compare.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/files.h"
#include "node/lab/compare/compare_config.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/lab/compare/emulated_link.h"
#include "node/launch/launcher.h"
#include "node/outputs/metrics.h"
#include "node/lab/report/report.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What one node left in summary.json (missing file: nullopt).
std::optional<json> ReadSummary(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return std::nullopt;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

double Number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// "test accuracy 86.1%, 2.3 MB sent per node, 21.4 s training" over the
// summaries of `nodes` nodes under `dir`.
std::string Headline(const std::string& dir, int nodes) {
  double acc = 0, bytes = 0, seconds = 0;
  int found = 0;
  for (int i = 0; i < nodes; ++i) {
    std::optional<json> s = ReadSummary(dir + "/node" + std::to_string(i) + "/summary.json");
    if (!s) continue;
    ++found;
    acc += Number(*s, "test_accuracy");
    bytes += Number(*s, "bytes_sent");
    seconds = std::max(seconds, Number(*s, "train_seconds"));
  }
  if (found == 0) return "no summaries";
  char line[160];
  std::snprintf(line, sizeof(line), "test accuracy %.2f%%, %.1f MB sent per node, %.1f s training",
                100.0 * acc / found, bytes / found / 1e6, seconds);
  return line;
}

std::vector<ConfigOverride> WithOrigin(const std::vector<std::string>& sets, const std::string& origin) {
  std::vector<ConfigOverride> out;
  for (const std::string& s : sets) out.push_back({s, origin + " " + s});
  return out;
}

}  // namespace

Result<CompareResult> RunCompare(const CompareOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(CompareConfig cc, ParseCompareFile(options.config_path));
  if (options.nodes > 0) cc.nodes = options.nodes;
  if (cc.slow_node >= cc.nodes) {
    return Err(InvalidArgument("compare: the straggler is node " + std::to_string(cc.slow_node) + " but there are only " +
                               std::to_string(cc.nodes) + " nodes"));
  }
  if (!options.only_methods.empty()) {
    std::vector<CompareMethod> chosen;
    for (const std::string& name : options.only_methods) {
      auto it = std::find_if(cc.methods.begin(), cc.methods.end(),
                             [&](const CompareMethod& m) { return m.name == name; });
      if (it == cc.methods.end()) {
        auto b = std::find_if(BuiltinMethods().begin(), BuiltinMethods().end(),
                              [&](const CompareMethod& m) { return m.name == name; });
        if (b == BuiltinMethods().end()) {
          return Err(InvalidArgument("compare: --methods names \"" + name + "\", which is neither in " +
                                     options.config_path + " nor built in"));
        }
        chosen.push_back(*b);
      } else {
        chosen.push_back(*it);
      }
    }
    cc.methods = std::move(chosen);
  }
  CHORUS_ASSIGN_OR_RETURN(Config base, LoadConfig(options.config_path, options.overrides));
  const std::string run_dir = base.run.output_dir + "/" + cc.name;

  // Every node of every method gets: the user's overrides, the method's, then these.
  auto run_overrides = [&](const std::string& method_name, int nodes) {
    return std::vector<std::string>{"run.output_dir=" + TomlQuote(run_dir), "run.name=" + TomlQuote(method_name),
                                    "cluster.min_nodes=" + std::to_string(nodes)};
  };
  // Validate everything before running anything: a typo in method 6 should
  // not surface after five methods have run.
  for (const CompareMethod& m : cc.methods) {
    std::vector<ConfigOverride> all = options.overrides;
    for (const ConfigOverride& o : WithOrigin(m.overrides, "method " + m.name + ":")) all.push_back(o);
    for (const ConfigOverride& o : WithOrigin(run_overrides(m.name, cc.nodes), "compare:")) all.push_back(o);
    Result<Config> c = LoadConfig(options.config_path, all);
    if (!c) return Err(InvalidArgument("method " + m.name + ": " + c.error().message()));
  }

  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Err(Unavailable("compare: cannot create " + run_dir + ": " + ec.message()));

  // Emulated links, when asked for and possible.
  std::unique_ptr<EmulatedLink> link;
  json link_json = nullptr;
  if (cc.link.enabled) {
    link_json = {{"bandwidth", cc.link.bandwidth}, {"latency", cc.link.latency}, {"emulated", false}};
    Status available = EmulatedLink::Available();
    if (!available.ok()) {
      const std::string note = "link emulation unavailable (" + available.message() +
                               "); running on loopback without shaping";
      std::fprintf(stderr, "compare: %s\n", note.c_str());
      link_json["note"] = note;
    } else {
      Result<std::unique_ptr<EmulatedLink>> made =
          EmulatedLink::Create(cc.nodes, LinkShape{cc.link.bytes_per_s, cc.link.latency_s});
      if (!made) return Err(Unavailable("compare: setting up emulated links: " + made.error().message()));
      link = std::move(*made);
      link_json["emulated"] = true;
      link_json["latency_emulated"] = link->latency_emulated();
      link_json["note"] = link->Describe();
      std::fprintf(stderr, "compare: emulated links: %s\n", link->Describe().c_str());
    }
  }

  CompareResult result;
  result.run_dir = run_dir;
  json single_node = nullptr;
  json methods_json = json::array();

  auto write_compare_json = [&]() -> Status {
    json j = {{"name", cc.name},
              {"kind", "compare"},
              {"source", options.config_path},
              {"nodes", cc.nodes},
              {"target_accuracy", cc.target_accuracy},
              {"model", trainer::ModelName(base.train.model)},
              {"precision", trainer::PrecisionName(base.train.precision)},
              {"epochs", base.train.epochs},
              {"batch_size", base.train.batch_size},
              {"global_batch", base.train.batch_size * cc.nodes},
              {"provider", gossip::ProviderName(link ? gossip::FabricProvider::kTcpRxm : base.fabric.provider)},
              {"link", link_json},
              {"straggler", cc.slow_node >= 0 ? json{{"node", cc.slow_node}, {"slowdown", cc.slowdown}} : json(nullptr)},
              {"single_node", single_node},
              {"methods", methods_json}};
    return WriteSummary(run_dir + "/compare.json", j);
  };

  // Launches `nodes` nodes with `sets` into runs/<name>/<dir_name>.
  auto launch = [&](const std::string& dir_name, int nodes, const std::vector<std::string>& sets,
                    CompareMethodOutcome* outcome, bool* interrupted) -> Status {
    const std::string method_dir = run_dir + "/" + dir_name;
    fs::remove_all(method_dir, ec);  // a stale node folder would mix into the report
    fs::create_directories(method_dir, ec);
    if (ec) return Unavailable("compare: cannot create " + method_dir + ": " + ec.message());
    LaunchOptions lo;
    lo.num_nodes = nodes;
    lo.config_path = options.config_path;
    lo.executable = options.executable;
    for (const ConfigOverride& o : options.overrides) lo.overrides.push_back(o.assignment);
    lo.overrides.insert(lo.overrides.end(), sets.begin(), sets.end());
    for (const std::string& s : run_overrides(dir_name, nodes)) lo.overrides.push_back(s);
    if (link && nodes == cc.nodes) {
      // shm would bypass the links.
      lo.overrides.push_back("fabric.provider=" + TomlQuote(gossip::ProviderName(gossip::FabricProvider::kTcpRxm)));
      for (int i = 0; i < nodes; ++i) {
        lo.node_hosts.push_back(link->host(i));
        lo.node_wrappers.push_back(link->Wrapper(i));
      }
    }
    if (cc.slow_node >= 0 && nodes == cc.nodes) {
      char slowdown[64];
      std::snprintf(slowdown, sizeof(slowdown), "train.slowdown=%.17g", cc.slowdown);
      lo.node_overrides.push_back({cc.slow_node, slowdown});
    }
    if (!options.verbose) lo.output_file = method_dir + "/launch.log";
    LaunchResult lr;
    const double t0 = NowSeconds();
    Status s = Launch(lo, &lr);
    outcome->name = dir_name;
    outcome->wall_seconds = NowSeconds() - t0;
    outcome->exit_code = 0;
    for (int code : lr.exit_codes) {
      if (code != 0) {
        outcome->exit_code = code;
        break;
      }
    }
    if (!s.ok()) {
      outcome->error = s.message();
      if (outcome->exit_code == 0) outcome->exit_code = 1;
    }
    *interrupted = lr.interrupted;
    return Status::Ok();
  };

  const size_t total = cc.methods.size() + (cc.single_node_baseline ? 1 : 0);
  size_t index = 0;
  if (cc.single_node_baseline) {
    // S of T = S.N.e: one node alone on one node's share of an epoch.
    ++index;
    const int shard = (base.data.train_limit > 0 ? base.data.train_limit : 60000) / cc.nodes;
    std::fprintf(stderr, "compare [%zu/%zu] single-node baseline (one node, %d samples)...\n", index, total,
                 shard);
    CompareMethodOutcome outcome;
    bool interrupted = false;
    CHORUS_RETURN_IF_ERROR(launch("single-node", 1,
                                  {"exchange.kind=\"none\"", "train.epochs=1",
                                   "data.train_limit=" + std::to_string(shard),
                                   "train.eval_every_steps=0"},
                                  &outcome, &interrupted));
    std::optional<json> s = ReadSummary(run_dir + "/single-node/node0/summary.json");
    if (s && outcome.exit_code == 0) {
      single_node = {{"samples_per_s", Number(*s, "samples_per_s")},
                     {"train_seconds", Number(*s, "train_seconds")},
                     {"dir", "single-node"}};
      std::fprintf(stderr, "compare:   one node alone: %.0f samples/s\n", Number(*s, "samples_per_s"));
    } else {
      std::fprintf(stderr, "compare:   baseline failed (%s); efficiency will be unknown\n", outcome.error.c_str());
    }
    if (interrupted) result.interrupted = true;
  }

  for (const CompareMethod& m : cc.methods) {
    if (result.interrupted) break;
    ++index;
    std::fprintf(stderr, "compare [%zu/%zu] %s (%s) on %d nodes...\n", index, total, m.name.c_str(),
                 m.label.c_str(), cc.nodes);
    CompareMethodOutcome outcome;
    bool interrupted = false;
    CHORUS_RETURN_IF_ERROR(launch(m.name, cc.nodes, m.overrides, &outcome, &interrupted));
    const std::string method_dir = run_dir + "/" + m.name;
    if (outcome.exit_code == 0) {
      std::fprintf(stderr, "compare:   done in %.1f s: %s\n", outcome.wall_seconds,
                   Headline(method_dir, cc.nodes).c_str());
    } else {
      std::fprintf(stderr, "compare:   FAILED after %.1f s: %s (nodes' lines: %s/launch.log)\n",
                   outcome.wall_seconds, outcome.error.c_str(), method_dir.c_str());
    }
    methods_json.push_back({{"name", m.name},
                            {"label", m.label},
                            {"family", m.family},
                            {"dir", m.name},
                            {"overrides", m.overrides},
                            {"exit_code", outcome.exit_code},
                            {"error", outcome.error},
                            {"wall_seconds", outcome.wall_seconds}});
    result.methods.push_back(outcome);
    CHORUS_RETURN_IF_ERROR(write_compare_json());
    if (interrupted) result.interrupted = true;
  }
  CHORUS_RETURN_IF_ERROR(write_compare_json());
  link.reset();  // remove the namespaces before the (slow) report

  if (options.report && !result.methods.empty()) {
    ReportOptions ro;
    ro.inputs = {run_dir};
    ro.output_dir = run_dir;
    ro.target_accuracy = cc.target_accuracy;
    Result<ReportResult> report = BuildReport(ro);
    if (!report) return Err(Internal("compare: building the report: " + report.error().message()));
    result.report_path = report->html_path;
    result.table_text = report->table_text;
  }
  return result;
}

}  // namespace chorus::node
