// node/lab/compare/: `chorus compare`: methods run one after another as local
// clusters (optionally behind emulated links), then reported.
//
// `chorus compare FILE`: the users' main job. Runs a matrix of methods (ring /
// tree all-reduce, D-PSGD, async pairwise gossip, CHOCO, local SGD, ...) one
// after another on N local nodes each, with the same model, data, seed, epochs
// and global batch (the file's node settings plus each method's overrides),
// optionally over emulated links, measures one node alone for the scaling
// efficiency, writes runs/<name>/compare.json and builds the report.
//
// Layout written (the contract `chorus report` reads):
//   runs/<name>/compare.json, runs/<name>/<method>/node<i>/{metrics.jsonl,summary.json,...},
//   runs/<name>/<method>/launch.log (the nodes' lines), runs/<name>/single-node/,
//   runs/<name>/report.html and runs/<name>/report/ (from BuildReport).
//
// Must not: know how methods train (the nodes do) or draw anything (report.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "node/config/config_parse.h"

namespace chorus::node {

struct CompareOptions {
  std::string config_path;                // the comparison file
  std::vector<ConfigOverride> overrides;  // node settings for every node of every method
  std::vector<std::string> only_methods;  // run these (names from the file); empty = all
  int nodes = 0;                          // > 0: instead of compare.nodes
  bool verbose = false;                   // node lines to the console, not <method>/launch.log
  bool report = true;                     // build report.html at the end
  std::string executable = "/proc/self/exe";  // the chorus binary the nodes run
};

struct CompareMethodOutcome {
  std::string name;
  int exit_code = 0;      // 0, or the first failing node's code
  double wall_seconds = 0.0;
  std::string error;      // launch's message when a node failed
};

struct CompareResult {
  std::string run_dir;      // runs/<name>
  std::string report_path;  // "" when no report was built
  std::string table_text;   // the table and where it ran (baseline, host, cores), as printed
  std::vector<CompareMethodOutcome> methods;
  bool interrupted = false;  // Ctrl-C: the remaining methods did not run
};

// Runs the comparison. Errors: a bad file (before anything runs), or nothing
// could be run at all. A method whose nodes fail is recorded and the others
// still run.
[[nodiscard]] Result<CompareResult> RunCompare(const CompareOptions& options);

}  // namespace chorus::node
