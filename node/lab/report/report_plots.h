// The plots of `chorus report`, drawn by gnuplot: the long-format curves.csv
// behind them, one gnuplot script per plot (kept next to the data so that a
// user can re-run or edit it: `cd report && gnuplot accuracy_time.gp`), and the
// gnuplot subprocess (SVG terminal) with a deadline.
//
// Must not: compute curves (report_data.h) or build HTML (report_html.h);
// fail the report when gnuplot is missing or fails: that is a note on the plot.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "node/lab/report/report_data.h"
#include "node/lab/report/report_table.h"

namespace chorus::node {

// kAccuracyByTime: the accuracy curve merged on the time axis (report_data.h).
// kConsensus: the exact distance; its plot also draws kConsensusEstimate (the
// neighbour estimate), which has no plot of its own.
enum class PlotQuantity { kAccuracy, kAccuracyByTime, kTrainLoss, kConsensus, kConsensusEstimate };
enum class PlotAxis { kTime, kBytes, kEpochs };

struct PlotSpec {
  std::string id;  // file stem: <id>.gp, <id>.svg
  std::string title;
  std::string caption;  // for people, under the plot
  PlotQuantity quantity;
  PlotAxis axis;
};

// The plots of a report, in the order shown: accuracy and training loss against
// wall time, bytes sent per node and epochs, then consensus distance (exact, and
// the neighbour estimate) against time.
const std::vector<PlotSpec>& ReportPlotSpecs();

struct Plot {
  PlotSpec spec;
  std::string script_path;  // written by WritePlotFiles ("" when nothing to draw)
  std::string svg_path;     // <report_dir>/<id>.svg
  std::string svg;          // the SVG file's text, once drawn
  std::string note;         // why there is no SVG ("" when there is one)
};

// Writes <report_dir>/curves.csv (long format: method_index, curve, step,
// time_s, bytes_sent_per_node, epochs, value, nodes, method; raw units, accuracy
// a fraction) and one gnuplot script per plot that has data. `curves[i]` and
// `rows[i]` belong to `methods[i]`. Accuracy is drawn in percent, as the table
// shows it, with `target_accuracy` (a fraction) as a dashed line. The consensus
// plot draws the methods whose row shows a consensus distance
// (ShowsConsensus), and its title names their families. Each method has a
// style of its own (colour, dash pattern, point type) for at least 12 methods.
[[nodiscard]] Result<std::vector<Plot>> WritePlotFiles(const std::string& report_dir,
                                                       const std::vector<MethodRun>& methods,
                                                       const std::vector<MethodCurves>& curves,
                                                       const std::vector<TableRow>& rows, double target_accuracy);

// A `chorus chaos` run (its chaos.jsonl): <report_dir>/chaos.csv (seconds
// after formation, cluster samples/s, running processes, membership size),
// chaos_faults.csv (seconds, fault, nodes) and a script drawing throughput and
// membership against time with every injected fault marked. A file without
// samples gives a plot with a note and no script.
[[nodiscard]] Result<Plot> WriteChaosPlot(const std::string& report_dir, const std::string& chaos_jsonl);

// Runs `gnuplot` (a name looked up in PATH, or a path) on every plot's script in
// `report_dir`, each under `timeout_s`, its output appended to
// <report_dir>/gnuplot.log. Fills Plot::svg, or Plot::note and a line in
// `warnings` (one line only when gnuplot cannot be started at all).
void RenderPlots(const std::string& gnuplot, const std::string& report_dir, double timeout_s,
                 std::vector<Plot>* plots, std::vector<std::string>* warnings);

// Exit status of `argv` run in `cwd` with stdin from /dev/null and stdout and
// stderr appended to `log_path`; NotFound when argv[0] cannot be executed,
// DeadlineExceeded (after killing it) when it runs past `timeout_s`.
[[nodiscard]] Result<int> RunLoggedProcess(const std::vector<std::string>& argv, const std::string& cwd,
                                           const std::string& log_path, double timeout_s);

// A gnuplot single-quoted string literal holding `text` (quotes doubled, line
// breaks and other control characters replaced by spaces).
std::string GnuplotQuote(const std::string& text);

}  // namespace chorus::node
