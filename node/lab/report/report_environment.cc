// The conditions of a report's runs as text (see report_environment.h).
//
// Must not: read files, build HTML, or state a fact no file recorded.
#include "node/lab/report/report_environment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace chorus::node {
namespace {

constexpr const char* kNotRecorded = "not recorded";

// 58727.4 -> "58,727".
std::string Grouped(double v) {
  std::string digits = std::to_string(static_cast<long long>(std::llround(std::fabs(v))));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string Format(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

double NumberIn(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : kReportNaN;
}

std::string Plural(double n, const char* word) {
  return Format("%.0f ", n) + word + (n == 1 ? "" : "s");
}

std::string ThreadsText(const RunEnvironment& env) {
  if (std::isnan(env.threads_max)) return kNotRecorded;
  if (env.threads_min == env.threads_max) return Format("%.0f", env.threads_max);
  return Format("%.0f", env.threads_min) + " to " + Format("%.0f", env.threads_max);
}

// "4 nodes x 1 thread = 4 threads on 2 cores".
std::string LoadText(const RunEnvironment& env) {
  return Plural(env.nodes, "node") + " x " + Plural(env.threads_max, "thread") + " = " +
         Plural(env.nodes * env.threads_max, "thread") + " on " + Plural(env.cores, "core");
}

// What sharing means for the efficiency column: at most about cores / (nodes x threads).
std::string CapText(const RunEnvironment& env) {
  const double cap = env.cores / (env.nodes * env.threads_max);
  return "which caps the efficiency column near " + Format("%.0f", env.cores) + " / " +
         Format("%.0f", env.nodes * env.threads_max) + " = " + Format("%.2f", cap);
}

bool LoadKnown(const RunEnvironment& env) {
  return env.nodes > 0 && !std::isnan(env.threads_max) && !std::isnan(env.cores) && env.cores > 0;
}

}  // namespace

RunEnvironment DescribeEnvironment(const RunSet& runs) {
  RunEnvironment env;
  env.virtual_time = runs.settings.is_object() && runs.settings.value("kind", "") == "simulate";
  const double listed_nodes = runs.settings.is_object() ? NumberIn(runs.settings, "nodes") : kReportNaN;
  for (const MethodRun& m : runs.methods) {
    env.nodes = std::max(env.nodes, static_cast<int>(m.nodes.size()));
    for (const NodeRun& node : m.nodes) {
      if (!node.summary) continue;
      const NodeSummary& s = *node.summary;
      if (!s.host_cpu.empty() && std::find(env.cpus.begin(), env.cpus.end(), s.host_cpu) == env.cpus.end()) {
        env.cpus.push_back(s.host_cpu);
      }
      if (s.host_cores > 0 && !(env.cores <= s.host_cores)) env.cores = s.host_cores;
      if (s.threads > 0) {
        if (!(env.threads_min <= s.threads)) env.threads_min = s.threads;
        if (!(env.threads_max >= s.threads)) env.threads_max = s.threads;
      }
    }
  }
  if (listed_nodes > 0) env.nodes = static_cast<int>(listed_nodes);
  return env;
}

std::string EvaluationPointsText(const nlohmann::json& settings) {
  if (!settings.is_object() || !settings.contains("simulation") || !settings.contains("epochs")) return "";
  const nlohmann::json& sim = settings["simulation"];
  if (!sim.is_object() || !sim.contains("evals") || !sim["evals"].is_number() || !settings["epochs"].is_number()) {
    return "";
  }
  const int evals = sim["evals"].get<int>();
  if (evals < 1) return "";
  return "Time to target: the first of " + std::to_string(evals) + " evaluation points, one every " +
         Format("%.3g", settings["epochs"].get<double>() / evals) +
         " epochs, at or above the target (--evals places more)\n";
}

std::string SingleNodeBaselineText(const nlohmann::json& single_node) {
  const double sps = single_node.is_object() ? NumberIn(single_node, "samples_per_s") : kReportNaN;
  if (!(sps > 0)) return "not measured (efficiency unknown)";
  std::string how = "one node";
  const double seconds = NumberIn(single_node, "train_seconds");
  if (seconds > 0) how += ", " + Format(seconds < 10 ? "%.2f" : "%.1f", seconds) + " s of training";
  if (auto source = single_node.find("source"); source != single_node.end() && source->is_string()) {
    how += ", " + source->get<std::string>();
  }
  return Grouped(sps) + " samples/s (" + how + ")";
}

namespace {

std::string StringIn(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// {"bandwidth": "1Gbit", "latency": "1ms", "emulated": true, ...}.
std::string LinkSentence(const nlohmann::json& link) {
  const std::string bandwidth = StringIn(link, "bandwidth"), latency = StringIn(link, "latency");
  std::string out = (bandwidth.empty() ? "unlimited" : bandwidth) + " per node, " +
                    (latency.empty() ? "no added" : latency) + " latency";
  if (link.value("simulated", false)) {
    out += ", modelled in virtual time";
  } else if (link.value("emulated", false)) {
    out += link.value("latency_emulated", true) ? ", emulated (tc)" : ", bandwidth emulated (tc), latency not";
    if (link.contains("site_link")) {
      out += link.value("site_latency_emulated", true) ? "; the link between sites emulated"
                                                       : "; the link between sites: bandwidth only";
    }
  } else {
    out += ", not emulated: the runs used loopback unshaped";
  }
  const std::string note = StringIn(link, "note");
  return note.empty() ? out : out + " (" + note + ")";
}

// {"node": 3, "slowdown": 2.0}: train.slowdown, extra time per step as a
// multiple of the step's own.
std::string StragglerSentence(const nlohmann::json& straggler) {
  const double node = NumberIn(straggler, "node"), slowdown = NumberIn(straggler, "slowdown");
  if (std::isnan(node) || std::isnan(slowdown)) return "";
  return "node " + Format("%.0f", node) + " waits " + Format("%g", slowdown) +
         " times its step time after each step (" + Format("%.3g", 1.0 / (1.0 + slowdown)) +
         " of full speed)";
}

// {"speeds": [1, 0.5], "batch_sizes": [32, 64]}.
std::string ProfilesSentence(const nlohmann::json& profiles) {
  std::string out;
  for (const auto& [key, words] : {std::pair<const char*, const char*>{"speeds", "speeds "},
                                   {"batch_sizes", "batch sizes "}}) {
    auto it = profiles.find(key);
    if (it == profiles.end() || !it->is_array()) continue;
    std::string list;
    for (const nlohmann::json& v : *it) {
      if (v.is_number()) list += (list.empty() ? "" : " / ") + Format("%g", v.get<double>());
    }
    out += (out.empty() ? "" : "; ") + std::string(words) + list + " (node 0 first)";
  }
  return out;
}

}  // namespace

std::string SettingSentence(const std::string& key, const nlohmann::json& value) {
  if (value.is_null()) return key == "single_node" ? SingleNodeBaselineText(value) : "none";
  if (!value.is_object()) return "";
  if (key == "single_node") return SingleNodeBaselineText(value);
  if (key == "link") return LinkSentence(value);
  if (key == "straggler") return StragglerSentence(value);
  if (key == "node_profiles") return ProfilesSentence(value);
  if (key == "late_joiner") {
    const double node = NumberIn(value, "node"), after = NumberIn(value, "after_s");
    if (std::isnan(node) || std::isnan(after)) return "";
    return "node " + Format("%.0f", node) + " joins " + Format("%g", after) +
           " s after the others start (in the full-size run of each method)";
  }
  return "";
}

bool NodesShareCores(const RunEnvironment& env) {
  return !env.virtual_time && LoadKnown(env) && env.nodes * env.threads_max > env.cores;
}

std::vector<std::pair<std::string, std::string>> EnvironmentRows(const RunEnvironment& env) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::string cpus;
  for (const std::string& cpu : env.cpus) cpus += (cpus.empty() ? "" : "; ") + cpu;
  rows.emplace_back("host CPU", cpus.empty() ? kNotRecorded : cpus);
  rows.emplace_back("cores", std::isnan(env.cores) ? kNotRecorded : Format("%.0f", env.cores));
  rows.emplace_back("threads per node", ThreadsText(env));
  std::string shared;
  if (env.virtual_time) {
    shared = "no effect: time is virtual (compute modelled per step), so sharing cores does not cap the efficiency";
  } else if (!LoadKnown(env)) {
    shared = kNotRecorded;
  } else if (NodesShareCores(env)) {
    shared = "yes: " + LoadText(env) + ", " + CapText(env);
  } else {
    shared = "no: " + LoadText(env);
  }
  rows.emplace_back("nodes shared cores", shared);
  return rows;
}

std::string EnvironmentLine(const RunEnvironment& env) {
  std::string line = "host " + (env.cpus.empty() ? std::string(kNotRecorded) : env.cpus.front());
  line += std::isnan(env.cores) ? ", cores not recorded" : " (" + Plural(env.cores, "core") + ")";
  if (std::isnan(env.threads_max)) {
    line += ", threads per node not recorded";
  } else {
    line += ", " + ThreadsText(env) + (env.threads_max == 1 ? " thread" : " threads") + " per node";
  }
  if (env.virtual_time) return line + "; time is virtual, so sharing cores does not cap the efficiency";
  if (NodesShareCores(env)) return line + ": " + LoadText(env) + ", so the nodes shared cores, " + CapText(env);
  if (LoadKnown(env)) return line + ": " + LoadText(env) + ", no core shared";
  return line;
}

}  // namespace chorus::node
