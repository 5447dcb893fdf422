// The conditions the runs of a report ran under, as people read them: the
// single-node baseline as a sentence, and the host, its cores, the compute
// threads per node and whether the nodes shared cores. Nodes that share cores
// cannot each run at the single-node speed, so sharing caps the efficiency
// column (4 single-thread nodes on 2 cores: near 0.5), and the report says so.
//
// Must not: read files (report_data.h does) or build HTML. A fact that no
// file recorded (runs older than the fields) is "not recorded", never guessed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "node/lab/report/report_data.h"

namespace chorus::node {

struct RunEnvironment {
  std::vector<std::string> cpus;   // distinct host.cpu of the summaries; empty: not recorded
  double cores = kReportNaN;       // the fewest host.cores a node recorded
  double threads_min = kReportNaN;  // train.threads over every node of every method
  double threads_max = kReportNaN;
  int nodes = 0;              // nodes per method: compare.json's "nodes", else the most of any method
  bool virtual_time = false;  // a simulation (compare.json kind "simulate"): compute time is modelled
};

// What `runs` recorded about where they ran.
RunEnvironment DescribeEnvironment(const RunSet& runs);

// compare.json's single_node as "58,727 samples/s (one node, 0.26 s of training)";
// "not measured (efficiency unknown)" when it is null or has no samples_per_s.
std::string SingleNodeBaselineText(const nlohmann::json& single_node);

// A simulation's time to target is the first evaluation point at or above
// it: one line that says how far apart the points of `settings`
// (compare.json) are, since a step's speed and a method's epochs to the
// target only show at that resolution. Empty for real runs (their points
// follow train.eval_every_epochs).
std::string EvaluationPointsText(const nlohmann::json& settings);

// A sentence for a compare.json setting whose value is an object (the single
// node, link, straggler, node profiles, late joiner), for example "node 3 joins
// 5 s after the others start"; "none" for null; "" for other keys and shapes.
std::string SettingSentence(const std::string& key, const nlohmann::json& value);

// Whether nodes x threads per node exceeds the cores; false when either is unknown
// or time is virtual.
bool NodesShareCores(const RunEnvironment& env);

// The rows of the settings table: host, cores, threads per node and whether the
// nodes shared cores (with the efficiency cap cores / (nodes x threads) when they did).
std::vector<std::pair<std::string, std::string>> EnvironmentRows(const RunEnvironment& env);

// One line for the console: "host AMD EPYC (2 cores), 1 thread per node: 4 nodes
// x 1 thread = 4 threads on 2 cores, so the nodes shared cores, which caps the
// efficiency column near 2 / 4 = 0.50".
std::string EnvironmentLine(const RunEnvironment& env);

}  // namespace chorus::node
