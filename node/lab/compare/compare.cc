// Running a comparison (see compare.h): validate every method's config first,
// then launch the methods one by one and write compare.json after each, so a
// comparison cut short still has a report of what ran.
#include "node/lab/compare/compare.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/files.h"
#include "node/lab/compare/compare_config.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/launch/emulated_link.h"
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

// What the steps of one comparison share.
struct CompareRun {
  CompareRun(const CompareOptions& options, CompareConfig cc, Config base)
      : options(options), cc(std::move(cc)), base(std::move(base)),
        run_dir(this->base.run.output_dir + "/" + this->cc.name) {}

  const CompareOptions& options;
  CompareConfig cc;
  Config base;
  const std::string run_dir;           // runs/<name>
  std::unique_ptr<EmulatedLink> link;  // null: loopback without shaping
  json link_json = nullptr;
  json single_node = nullptr;          // the baseline's numbers, once measured
  json methods_json = json::array();   // one entry per method run so far
  CompareResult result;
};

// The comparison file with the command line's choices applied: --nodes, and
// --methods (names from the file, else built in).
Result<CompareConfig> LoadComparison(const CompareOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(CompareConfig cc, ParseCompareFile(options.config_path));
  if (options.nodes > 0) cc.nodes = options.nodes;
  for (const auto& [key, size] : {std::pair<const char*, size_t>{"speeds", cc.speeds.size()},
                                  std::pair<const char*, size_t>{"batch_sizes", cc.batch_sizes.size()}}) {
    if (size > 0 && size != static_cast<size_t>(cc.nodes)) {
      return Err(InvalidArgument("compare: --nodes " + std::to_string(cc.nodes) + " but compare." + key + " in " +
                                 options.config_path + " lists " + std::to_string(size) + " nodes"));
    }
  }
  if (cc.slow_node >= cc.nodes) {
    return Err(InvalidArgument("compare: the straggler is node " + std::to_string(cc.slow_node) + " but there are only " +
                               std::to_string(cc.nodes) + " nodes"));
  }
  if (cc.late_node >= cc.nodes) {
    return Err(InvalidArgument("compare: the late joiner is node " + std::to_string(cc.late_node) +
                               " but there are only " + std::to_string(cc.nodes) + " nodes"));
  }
  if (options.only_methods.empty()) return cc;
  std::vector<CompareMethod> chosen;
  for (const std::string& name : options.only_methods) {
    const CompareMethod* method = FindMethod(cc.methods, name);
    if (method == nullptr) {
      return Err(InvalidArgument("compare: --methods names \"" + name + "\", which is neither in " +
                                 options.config_path + " nor built in"));
    }
    chosen.push_back(*method);
  }
  cc.methods = std::move(chosen);
  return cc;
}

// The nodes that form the cluster of a launch of `nodes` nodes: all of them,
// less the late joiner in the full cluster (it joins the running one).
int OnTimeNodes(const CompareConfig& cc, int nodes) {
  return cc.late_node >= 0 && nodes == cc.nodes ? nodes - 1 : nodes;
}

// Every node of every method gets: the user's overrides, the method's, then these.
std::vector<std::string> RunOverrides(const std::string& run_dir, const std::string& method_name, int min_nodes) {
  return std::vector<std::string>{"run.output_dir=" + TomlQuote(run_dir), "run.name=" + TomlQuote(method_name),
                                  "cluster.min_nodes=" + std::to_string(min_nodes)};
}

// Validate everything before running anything: a typo in method 6 should
// not surface after five methods have run. Every node with settings of its
// own (the profiles) is checked as that node.
Status ValidateMethods(const CompareRun& run) {
  const std::vector<std::pair<int, std::string>> node_settings = ProfileNodeSettings(run.cc);
  for (const CompareMethod& m : run.cc.methods) {
    std::vector<ConfigOverride> all = run.options.overrides;
    for (const ConfigOverride& o : WithOrigin(m.overrides, "method " + m.name + ":")) all.push_back(o);
    const int min_nodes = OnTimeNodes(run.cc, run.cc.nodes);
    for (const ConfigOverride& o : WithOrigin(RunOverrides(run.run_dir, m.name, min_nodes), "compare:")) {
      all.push_back(o);
    }
    Result<Config> c = LoadConfig(run.options.config_path, all);
    if (!c) return InvalidArgument("method " + m.name + ": " + c.error().message());
    for (int node = 0; node < run.cc.nodes; ++node) {
      std::vector<ConfigOverride> own = all;
      for (const auto& [i, setting] : node_settings) {
        if (i == node) own.push_back({setting, "compare: node" + std::to_string(node) + " " + setting});
      }
      if (own.size() == all.size()) continue;
      Result<Config> n = LoadConfig(run.options.config_path, own);
      if (!n) return InvalidArgument("method " + m.name + ", node" + std::to_string(node) + ": " + n.error().message());
    }
  }
  return Status::Ok();
}

Status CreateRunDir(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Unavailable("compare: cannot create " + run_dir + ": " + ec.message());
  return Status::Ok();
}

// Emulated links, when asked for and possible.
Status SetUpLinks(CompareRun& run) {
  const LinkSpec& spec = run.cc.link;
  if (!spec.enabled) return Status::Ok();
  run.link_json = {{"bandwidth", spec.bandwidth}, {"latency", spec.latency}, {"emulated", false}};
  Status available = EmulatedLink::Available();
  if (!available.ok()) {
    const std::string note = "link emulation unavailable (" + available.message() +
                             "); running on loopback without shaping";
    std::fprintf(stderr, "compare: %s\n", note.c_str());
    run.link_json["note"] = note;
    return Status::Ok();
  }
  std::optional<SiteLinks> sites;
  if (!run.cc.sites.empty()) {
    sites = SiteLinks{SiteOfNode(run.cc), LinkShape{run.cc.site_link.bytes_per_s, run.cc.site_link.latency_s}};
    run.link_json["sites"] = run.cc.sites;
    run.link_json["site_link"] = {{"bandwidth", run.cc.site_link.bandwidth}, {"latency", run.cc.site_link.latency}};
  }
  Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(
      run.cc.nodes, LinkShape{spec.bytes_per_s, spec.latency_s}, sites ? &*sites : nullptr);
  if (!made) return Unavailable("compare: setting up emulated links: " + made.error().message());
  run.link = std::move(*made);
  run.link_json["emulated"] = true;
  run.link_json["latency_emulated"] = run.link->latency_emulated();
  if (sites) run.link_json["site_latency_emulated"] = run.link->site_latency_emulated();
  run.link_json["note"] = run.link->Describe();
  std::fprintf(stderr, "compare: emulated links: %s\n", run.link->Describe().c_str());
  return Status::Ok();
}

// The per-node profiles as compare.json records them: {"speeds": [...],
// "batch_sizes": [...]} (a key only when given), null when neither is.
json ProfilesJson(const CompareConfig& cc) {
  if (cc.speeds.empty() && cc.batch_sizes.empty()) return nullptr;
  json j = json::object();
  if (!cc.speeds.empty()) j["speeds"] = cc.speeds;
  if (!cc.batch_sizes.empty()) j["batch_sizes"] = cc.batch_sizes;
  return j;
}

// What the nodes differ in, for the progress line: ", speeds 1/1/0.5,
// batches 32/64" ("" when they do not).
std::string ProfilesText(const CompareConfig& cc) {
  std::string out;
  auto list = [](const auto& values) {
    std::string text;
    for (const auto& v : values) {
      char item[32];
      std::snprintf(item, sizeof(item), "%g", static_cast<double>(v));
      text += (text.empty() ? "" : "/") + std::string(item);
    }
    return text;
  };
  if (!cc.speeds.empty()) out += ", speeds " + list(cc.speeds);
  if (!cc.batch_sizes.empty()) out += ", batches " + list(cc.batch_sizes);
  return out;
}

// runs/<name>/compare.json: the settings and every method run so far.
Status WriteCompareJson(const CompareRun& run) {
  const CompareConfig& cc = run.cc;
  const Config& base = run.base;
  json j = {{"name", cc.name},
            {"kind", "compare"},
            {"source", run.options.config_path},
            {"nodes", cc.nodes},
            {"target_accuracy", cc.target_accuracy},
            {"model", trainer::ModelName(base.train.model)},
            {"precision", trainer::PrecisionName(base.train.precision)},
            {"epochs", base.train.epochs},
            {"batch_size", base.train.batch_size},
            {"global_batch", CompareGlobalBatch(cc, base.train.batch_size)},
            {"provider", gossip::ProviderName(run.link ? gossip::FabricProvider::kTcpRxm : base.fabric.provider)},
            {"link", run.link_json},
            {"straggler", cc.slow_node >= 0 ? json{{"node", cc.slow_node}, {"slowdown", cc.slowdown}} : json(nullptr)},
            {"node_profiles", ProfilesJson(cc)},
            {"late_joiner",
             cc.late_node >= 0 ? json{{"node", cc.late_node}, {"after_s", cc.late_after_s}} : json(nullptr)},
            {"single_node", run.single_node},
            {"methods", run.methods_json}};
  return WriteSummary(run.run_dir + "/compare.json", j);
}

// How to launch `nodes` nodes with `sets` into `method_dir` (runs/<name>/<dir_name>):
// over the emulated links and with the profiles (straggler, speeds, batch
// sizes) and the late joiner when it is the full cluster.
LaunchOptions MethodLaunchOptions(const CompareRun& run, const std::string& dir_name, int nodes,
                                  const std::vector<std::string>& sets, const std::string& method_dir) {
  const CompareConfig& cc = run.cc;
  LaunchOptions lo;
  lo.num_nodes = nodes;
  lo.config_path = run.options.config_path;
  lo.executable = run.options.executable;
  for (const ConfigOverride& o : run.options.overrides) lo.overrides.push_back(o.assignment);
  lo.overrides.insert(lo.overrides.end(), sets.begin(), sets.end());
  for (const std::string& s : RunOverrides(run.run_dir, dir_name, OnTimeNodes(cc, nodes))) lo.overrides.push_back(s);
  if (run.link && nodes == cc.nodes) {
    // shm would bypass the links.
    lo.overrides.push_back("fabric.provider=" + TomlQuote(gossip::ProviderName(gossip::FabricProvider::kTcpRxm)));
    for (int i = 0; i < nodes; ++i) {
      lo.node_hosts.push_back(run.link->host(i));
      lo.node_wrappers.push_back(run.link->Wrapper(i));
    }
  }
  if (nodes == cc.nodes) lo.node_overrides = ProfileNodeSettings(cc);
  if (run.link && nodes == cc.nodes) {
    // Each namespace stands for a machine of its own, in its site.
    const std::vector<int> site = SiteOfNode(cc);
    for (int i = 0; i < nodes; ++i) {
      lo.node_overrides.emplace_back(i, "cluster.host_group=" + TomlQuote("emulated-host" + std::to_string(i)));
      if (!site.empty()) {
        lo.node_overrides.emplace_back(i, "cluster.site=" + TomlQuote("site" + std::to_string(site[i])));
      }
    }
  }
  if (cc.late_node >= 0 && nodes == cc.nodes) lo.join_after.push_back({cc.late_node, cc.late_after_s});
  if (!run.options.verbose) lo.output_file = method_dir + "/launch.log";
  return lo;
}

// What one launch did: the outcome recorded, and whether Ctrl-C cut it short.
struct Launched {
  CompareMethodOutcome outcome;
  bool interrupted = false;
};

// Launches `nodes` nodes with `sets` into runs/<name>/<dir_name>. Fails only
// when the folder cannot be made; failing nodes are the outcome's.
Result<Launched> LaunchMethod(const CompareRun& run, const std::string& dir_name, int nodes,
                              const std::vector<std::string>& sets) {
  const std::string method_dir = run.run_dir + "/" + dir_name;
  std::error_code ec;
  fs::remove_all(method_dir, ec);  // a stale node folder would mix into the report
  fs::create_directories(method_dir, ec);
  if (ec) return Err(Unavailable("compare: cannot create " + method_dir + ": " + ec.message()));
  const LaunchOptions lo = MethodLaunchOptions(run, dir_name, nodes, sets, method_dir);
  LaunchResult lr;
  const double t0 = NowSeconds();
  Status s = Launch(lo, &lr);
  Launched launched;
  CompareMethodOutcome& outcome = launched.outcome;
  outcome.name = dir_name;
  outcome.wall_seconds = NowSeconds() - t0;
  outcome.exit_code = 0;
  for (int code : lr.exit_codes) {
    if (code != 0) {
      outcome.exit_code = code;
      break;
    }
  }
  if (!s.ok()) {
    outcome.error = s.message();
    if (outcome.exit_code == 0) outcome.exit_code = 1;
  }
  launched.interrupted = lr.interrupted;
  return launched;
}

// S of T = S.N.e: one node alone on one node's share of an epoch.
Status RunSingleNodeBaseline(CompareRun& run, size_t index, size_t total) {
  const int shard = (run.base.data.train_limit > 0 ? run.base.data.train_limit : 60000) / run.cc.nodes;
  std::fprintf(stderr, "compare [%zu/%zu] single-node baseline (one node, %d samples)...\n", index, total,
               shard);
  CHORUS_ASSIGN_OR_RETURN(Launched launched,
                          LaunchMethod(run, "single-node", 1,
                                       {"exchange.kind=\"none\"", "train.epochs=1",
                                        "data.train_limit=" + std::to_string(shard),
                                        "train.eval_every_steps=0"}));
  std::optional<json> s = ReadSummary(run.run_dir + "/single-node/node0/summary.json");
  if (s && launched.outcome.exit_code == 0) {
    run.single_node = {{"samples_per_s", Number(*s, "samples_per_s")},
                       {"train_seconds", Number(*s, "train_seconds")},
                       {"dir", "single-node"}};
    std::fprintf(stderr, "compare:   one node alone: %.0f samples/s\n", Number(*s, "samples_per_s"));
  } else {
    std::fprintf(stderr, "compare:   baseline failed (%s); efficiency will be unknown\n",
                 launched.outcome.error.c_str());
  }
  if (launched.interrupted) run.result.interrupted = true;
  return Status::Ok();
}

// One method on every node; records it and rewrites compare.json.
Status RunOneMethod(CompareRun& run, const CompareMethod& m, size_t index, size_t total) {
  std::string late;
  if (run.cc.late_node >= 0) {
    late = ", node" + std::to_string(run.cc.late_node) + " joining after " + SecondsText(run.cc.late_after_s) + " s";
  }
  std::fprintf(stderr, "compare [%zu/%zu] %s (%s) on %d nodes%s%s...\n", index, total, m.name.c_str(),
               m.label.c_str(), run.cc.nodes, ProfilesText(run.cc).c_str(), late.c_str());
  CHORUS_ASSIGN_OR_RETURN(Launched launched, LaunchMethod(run, m.name, run.cc.nodes, m.overrides));
  const CompareMethodOutcome& outcome = launched.outcome;
  const std::string method_dir = run.run_dir + "/" + m.name;
  if (outcome.exit_code == 0) {
    std::fprintf(stderr, "compare:   done in %.1f s: %s\n", outcome.wall_seconds,
                 Headline(method_dir, run.cc.nodes).c_str());
  } else {
    std::fprintf(stderr, "compare:   FAILED after %.1f s: %s (nodes' lines: %s/launch.log)\n",
                 outcome.wall_seconds, outcome.error.c_str(), method_dir.c_str());
  }
  run.methods_json.push_back({{"name", m.name},
                              {"label", m.label},
                              {"family", m.family},
                              {"dir", m.name},
                              {"overrides", m.overrides},
                              {"exit_code", outcome.exit_code},
                              {"error", outcome.error},
                              {"wall_seconds", outcome.wall_seconds}});
  run.result.methods.push_back(outcome);
  CHORUS_RETURN_IF_ERROR(WriteCompareJson(run));
  if (launched.interrupted) run.result.interrupted = true;
  return Status::Ok();
}

// report.html and the table, from the files just written.
Status BuildCompareReport(CompareRun& run) {
  ReportOptions ro;
  ro.inputs = {run.run_dir};
  ro.output_dir = run.run_dir;
  ro.target_accuracy = run.cc.target_accuracy;
  Result<ReportResult> report = BuildReport(ro);
  if (!report) return Internal("compare: building the report: " + report.error().message());
  run.result.report_path = report->html_path;
  run.result.table_text = report->table_text + report->environment_text;
  return Status::Ok();
}

}  // namespace

Result<CompareResult> RunCompare(const CompareOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(CompareConfig cc, LoadComparison(options));
  CHORUS_ASSIGN_OR_RETURN(Config base, LoadConfig(options.config_path, options.overrides));
  CompareRun run(options, std::move(cc), std::move(base));
  CHORUS_RETURN_IF_ERROR(ValidateMethods(run));
  CHORUS_RETURN_IF_ERROR(CreateRunDir(run.run_dir));
  CHORUS_RETURN_IF_ERROR(SetUpLinks(run));
  run.result.run_dir = run.run_dir;

  const size_t total = run.cc.methods.size() + (run.cc.single_node_baseline ? 1 : 0);
  size_t index = 0;
  if (run.cc.single_node_baseline) CHORUS_RETURN_IF_ERROR(RunSingleNodeBaseline(run, ++index, total));
  for (const CompareMethod& m : run.cc.methods) {
    if (run.result.interrupted) break;
    CHORUS_RETURN_IF_ERROR(RunOneMethod(run, m, ++index, total));
  }
  CHORUS_RETURN_IF_ERROR(WriteCompareJson(run));
  run.link.reset();  // remove the namespaces before the (slow) report

  if (options.report && !run.result.methods.empty()) CHORUS_RETURN_IF_ERROR(BuildCompareReport(run));
  return std::move(run.result);
}

}  // namespace chorus::node
