// node/lab/report/: `chorus report`: runs into a table, gnuplot plots and one HTML page.
//
// `chorus report`: turns one comparison directory, or a set of run directories,
// into <output_dir>/report.html (self-contained: table, gnuplot SVG plots,
// settings, notes) and the raw data behind it in <output_dir>/report/
// (table.csv, table.json, curves.csv, one gnuplot script and SVG per plot).
// `chorus compare` calls BuildReport on the comparison it just ran.
//
// Input layout (the run-directory contract): a comparison directory holds
// compare.json (optional) and one folder per method; a method folder (or a plain
// run directory) holds one folder per node with metrics.jsonl and summary.json.
// See report_data.h (loading, curves), report_table.h (the table),
// report_plots.h (gnuplot) and report_html.h (the page).
//
// Must not: fail because gnuplot is missing or fails (the report says so and the
// table, CSV and HTML are still written), or write outside output_dir.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "node/lab/report/report_data.h"
#include "node/lab/report/report_environment.h"
#include "node/lab/report/report_table.h"

namespace chorus::node {

inline constexpr double kDefaultTargetAccuracy = 0.85;

struct ReportOptions {
  // Comparison or run directories; methods of all of them are compared.
  std::vector<std::string> inputs;
  // Where report.html and report/ go. Empty: the first input when it is a
  // comparison directory, else <parent of the first input>/report-<YYYYmmdd-HHMMSS>.
  std::string output_dir;
  // Target for "time to target", in 0..1. < 0: compare.json's target_accuracy,
  // else kDefaultTargetAccuracy.
  double target_accuracy = -1;
  // Run gnuplot. False: scripts and data are still written, the page says the
  // plots were not drawn.
  bool render_plots = true;
  // The gnuplot program: a name looked up in PATH, or a path.
  std::string gnuplot = "gnuplot";
  // Deadline for one gnuplot run (one plot).
  double gnuplot_timeout_s = 60.0;
};

struct ReportResult {
  std::string html_path;               // <output_dir>/report.html
  std::string report_dir;              // <output_dir>/report
  std::string table_text;              // the table as aligned plain text, for the console
  // For the console: the single-node baseline and where the runs ran (host,
  // cores, threads per node, whether nodes shared cores), one line each.
  std::string environment_text;
  nlohmann::json table;                // rows as in table.json (TableToJson)
  std::vector<std::string> svg_paths;  // plots drawn
  std::vector<std::string> warnings;   // also listed as notes in the page
};

// What the report shows, without writing anything: the runs read, each method's
// curves (curves[i] for runs.methods[i]), the table rows and the target used.
struct ReportData {
  RunSet runs;
  std::vector<MethodCurves> curves;
  std::vector<TableRow> rows;
  double target_accuracy = kDefaultTargetAccuracy;
  RunEnvironment environment;
};

// Loads `inputs` (LoadRunSet) and computes curves and table for
// `target_accuracy` (< 0: compare.json's, else the default). InvalidArgument for
// a target over 1. Warnings are in runs.warnings.
[[nodiscard]] Result<ReportData> LoadReportData(const std::vector<std::string>& inputs,
                                                double target_accuracy);

// Loads, computes, writes the files and draws the plots.
[[nodiscard]] Result<ReportResult> BuildReport(const ReportOptions& options);

}  // namespace chorus::node
