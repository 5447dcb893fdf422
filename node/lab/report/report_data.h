// Loading recorded runs for `chorus report`: a comparison directory (compare.json
// and one folder per method) or plain run directories (node folders directly
// inside) become a RunSet; each method's node records become per-method curves
// (mean over nodes at each evaluation / logging point). The layout and the
// aggregation rules are the ones in the run-directory contract (report.h).
//
// Must not: draw, write files or run processes (report_render.h does), or decide
// table formatting (report_table.h does). Missing fields are NaN, never guessed.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace chorus::node {

inline constexpr double kReportNaN = std::numeric_limits<double>::quiet_NaN();

// One parsed line of metrics.jsonl. Every field that is absent, null or not a
// number is NaN (step: -1).
struct MetricsRecord {
  int line = 0;  // 1-based line in the file
  int64_t step = -1;
  double epoch = kReportNaN;               // evaluation records: epochs completed
  double epoch_progress = kReportNaN;      // epochs done, fractional
  double time_s = kReportNaN;              // since training start, without evaluation time
  double loss = kReportNaN;                // training loss
  double samples = kReportNaN;             // this node's samples so far
  double bytes_sent = kReportNaN;          // cumulative, this node
  // consensus_distance_estimate (consensus_distance in older records): this
  // node's distance to the neighbours it heard from (GossipStats::neighbor_distance).
  double consensus_estimate = kReportNaN;
  // consensus_distance_exact (evaluation records): the relative distance of
  // the farthest replica from the mean of all, the same on every node.
  double consensus_exact = kReportNaN;
  // consensus_point: the measurement's key, the same on every node, where
  // the nodes measure at their own steps (pairwise-async); -1 when absent.
  int64_t consensus_point = -1;
  double eval_accuracy = kReportNaN;
  double eval_loss = kReportNaN;

  bool is_eval() const { return eval_accuracy == eval_accuracy; }  // not NaN
};

// The fields of summary.json the report uses (NaN / empty when absent).
struct NodeSummary {
  double test_accuracy = kReportNaN;
  double test_loss = kReportNaN;
  double train_seconds = kReportNaN;
  double samples_per_s = kReportNaN;
  double bytes_sent = kReportNaN;
  double consensus_distance_after = kReportNaN;
  std::string exchange;  // e.g. "allreduce ring over 4 nodes (...)"
  std::string model;
  double epochs = kReportNaN;
  double global_batch = kReportNaN;
  double world_size = kReportNaN;
  double steps = kReportNaN;    // steps this node trained (unequal under train.stop = "samples")
  double samples = kReportNaN;  // samples this node trained
  double threads = kReportNaN;  // train.threads: compute threads of this node
  std::string host_cpu;         // host.cpu: the CPU model of the host ("" when not recorded)
  double host_cores = kReportNaN;  // host.cores: logical CPUs the node could run on
};

// One node folder (node0/, or any folder holding metrics.jsonl or summary.json).
struct NodeRun {
  std::string name;  // folder name
  std::string dir;
  std::vector<MetricsRecord> records;  // in file order; malformed lines skipped
  std::optional<NodeSummary> summary;  // absent when the node did not finish
};

// One method: the run directory of one `chorus launch`.
struct MethodRun {
  std::string name;    // compare.json methods[].name, or the folder's name
  std::string label;   // shown in the table and legends (defaults to name)
  std::string family;  // "allreduce", "gossip", "local-sgd", "low-communication", or "" when unknown
  std::string dir;
  std::optional<int> exit_code;                   // from compare.json
  std::string error;                              // compare.json: why it failed ("" if it did not)
  std::vector<std::string> overrides;             // compare.json: the settings that make the method
  double wall_seconds = kReportNaN;               // from compare.json
  double single_node_samples_per_s = kReportNaN;  // S of its comparison (NaN: unknown)
  // The nodes that evaluate during training when only a sample of them does by
  // design (compare.json's simulation.eval_nodes, as folder names "node<i>");
  // empty: every node is meant to. The others' missing evaluations are no anomaly.
  std::vector<std::string> sampled_evaluators;
  std::vector<NodeRun> nodes;                     // natural order (node2 before node10)
};

// Everything `chorus report` read.
struct RunSet {
  std::string title;                    // comparison name, or the run names joined
  nlohmann::json settings;              // compare.json of the first comparison input; null if none
  std::string settings_path;            // where `settings` came from ("" if none)
  double target_accuracy = kReportNaN;  // compare.json's target (NaN when none)
  bool first_input_is_comparison = false;
  std::vector<MethodRun> methods;
  std::vector<std::string> warnings;  // "file:line: ..." notes for the report
};

// Parses metrics.jsonl text. A line that is not a JSON object is skipped with a
// warning "path:line: ..." (a killed node may leave half a line); a field of the
// wrong type is treated as absent, with one warning per field and file.
std::vector<MetricsRecord> ParseMetricsLines(std::string_view text, const std::string& path,
                                             std::vector<std::string>* warnings);

// Parses summary.json text; DataLoss naming path and line when it is not a JSON object.
[[nodiscard]] Result<NodeSummary> ParseNodeSummary(std::string_view text, const std::string& path);

// Reads one node folder (metrics.jsonl and summary.json, either may be absent but
// not both).
[[nodiscard]] Result<NodeRun> LoadNodeRun(const std::string& dir, std::vector<std::string>* warnings);

// Reads `inputs`: each a comparison directory (compare.json, or method folders
// holding node folders) or a plain run directory (node folders inside). When
// compare.json has "methods", those are the methods, in that order (a listed
// method without its folder becomes a row without figures and a warning; other
// folders, such as the single-node baseline, are not methods). Method names are
// made unique across inputs ("<input folder>/<name>"). NotFound for a missing
// input; InvalidArgument when an input holds no node folders or lists no
// methods; DataLoss (file and line) for a malformed compare.json or summary.json.
[[nodiscard]] Result<RunSet> LoadRunSet(const std::vector<std::string>& inputs);

// A point of a method's curve: the mean over the nodes that have it.
struct CurvePoint {
  int64_t step = -1;                   // the group's step (-1 when grouped by order)
  double time_s = kReportNaN;          // max over nodes
  double bytes_per_node = kReportNaN;  // mean bytes_sent over nodes
  double epochs = kReportNaN;          // mean epochs done
  double value = kReportNaN;           // mean of the curve's quantity
  int nodes = 0;                       // how many nodes contributed
};

struct MethodCurves {
  // Mean eval_accuracy; the k-th evaluation record of every node makes point k
  // (nodes evaluate on the same schedule; asynchronous ones at different steps).
  std::vector<CurvePoint> accuracy;
  // The same evaluations merged on the time axis: at each evaluation time of any
  // node (once every node has evaluated), the mean over nodes of each node's
  // latest accuracy, and of its bytes sent and epochs at that time (between two
  // of its evaluations: interpolated in time). Close to `accuracy` for
  // synchronous methods, though between two nodes' evaluations of one round it
  // mixes rounds; for asynchronous ones with a straggler it shows the fast
  // nodes' progress when it happens. Time to target is read here for methods
  // whose nodes evaluate at different steps, from `accuracy` for lock-step ones.
  std::vector<CurvePoint> accuracy_by_time;
  // Mean training loss of the logging records (grouped by step, else by order);
  // evaluation records only when a node has no other record with a loss.
  std::vector<CurvePoint> train_loss;
  // The exact consensus distance of the evaluation records, grouped by step,
  // or by consensus_point where every such record has one (every node
  // records the same value).
  std::vector<CurvePoint> consensus;
  // Mean neighbour estimate of the consensus distance, grouped like train_loss.
  std::vector<CurvePoint> consensus_estimate;
};

// A consensus point (distance between replicas) needs records of at least this
// many nodes at its step: one node alone (the others past it or ended) says
// nothing about the distance between replicas.
inline constexpr int kMinConsensusNodes = 2;

// Builds the curves of one method. Points whose value is NaN are left out, and
// consensus points with fewer than kMinConsensusNodes nodes.
// `warnings` (may be null) receives notes such as unequal evaluation counts.
MethodCurves BuildMethodCurves(const MethodRun& method, std::vector<std::string>* warnings);

// Epochs done at `record` of a node: epoch_progress; else (evaluation records)
// epoch; else samples / (samples per epoch, learnt from the node's evaluation
// records); else NaN.
double RecordEpochs(const MetricsRecord& record, double samples_per_epoch);

// `v` for a CSV cell (10 significant digits); empty when it is not finite.
std::string CsvNumber(double v);

}  // namespace chorus::node
