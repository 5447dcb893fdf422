// The table of `chorus report`: one row per method with the columns of the
// run-directory contract, computed from a method's node summaries and its
// accuracy curve, and written as aligned text (console), CSV and JSON.
//
// Must not: read files or draw. A figure that cannot be computed is NaN in a
// TableRow, "-" in text, an empty cell in CSV and null in JSON (never NaN there).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/lab/report/report_data.h"

namespace chorus::node {

struct TableRow {
  std::string method;  // MethodRun::name
  std::string label;   // shown
  std::string family;
  int nodes = 0;
  double final_accuracy = kReportNaN;            // mean over nodes of summary test_accuracy (0..1)
  double time_to_target_s = kReportNaN;          // first accuracy-curve point >= target
  double bytes_to_target = kReportNaN;           // bytes sent per node at that point
  double epochs_to_target = kReportNaN;          // epochs done at that point
  double train_seconds = kReportNaN;             // max over nodes of summary train_seconds
  double bytes_sent = kReportNaN;                // mean over nodes of summary bytes_sent
  double samples_per_s = kReportNaN;             // mean over nodes of summary samples_per_s
  double efficiency = kReportNaN;                // sum of samples_per_s / (S x N); NaN when S is unknown
  double consensus_distance_after = kReportNaN;  // mean over nodes (gossip only)
  double steps_min = kReportNaN;                 // fewest and most steps a node trained
  double steps_max = kReportNaN;
};

// The row of `method`, whose accuracy curve is `curves.accuracy`, for
// `target_accuracy` (0..1). Node summaries that are missing leave their columns
// NaN; efficiency needs every node's samples_per_s.
TableRow ComputeTableRow(const MethodRun& method, const MethodCurves& curves, double target_accuracy);

// Whether the row shows a consensus distance (after the consensus phase):
// the methods drawn in the consensus plot.
bool ShowsConsensus(const TableRow& row);

// Column headings in order (the contract's), and one row's cells as shown ("-"
// for NaN): final acc in %, bytes in MB (10^6 bytes).
std::vector<std::string> TableHeadings();
std::vector<std::string> TableCells(const TableRow& row);

// `v` with `decimals` decimals, "-" for NaN or infinity: a table cell.
std::string FixedCell(double v, int decimals);

// The table as aligned plain text with a header line.
std::string FormatTableText(const std::vector<TableRow>& rows);
// `lines` (the first the header) as aligned plain text: the first column
// left-aligned, the others right-aligned, two spaces apart.
std::string AlignedText(const std::vector<std::vector<std::string>>& lines);
// CSV with a header line of machine names and units; raw units (fraction, bytes).
std::string TableToCsv(const std::vector<TableRow>& rows);
// A JSON array of row objects with the same keys as the CSV; null for NaN.
nlohmann::json TableToJson(const std::vector<TableRow>& rows);

// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma,
// quote or line break. Shared by table.csv and curves.csv.
std::string CsvField(const std::string& text);

}  // namespace chorus::node
