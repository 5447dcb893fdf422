// The table of `chorus report` (see report_table.h): row figures from summaries
// and the accuracy curve, and their text, CSV and JSON forms.
//
// Must not: read files or draw; print NaN anywhere.
#include "node/lab/report/report_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace chorus::node {
namespace {

// Mean over nodes of a summary field (nodes without a summary or the field are skipped).
double SummaryMean(const MethodRun& m, double NodeSummary::*field) {
  double sum = 0.0;
  int n = 0;
  for (const NodeRun& node : m.nodes) {
    if (node.summary && !std::isnan((*node.summary).*field)) {
      sum += (*node.summary).*field;
      ++n;
    }
  }
  return n > 0 ? sum / n : kReportNaN;
}

// The largest (sign +1) or smallest (-1) of a summary field over nodes.
double SummaryExtreme(const MethodRun& m, double NodeSummary::*field, double sign) {
  double best = kReportNaN;
  for (const NodeRun& node : m.nodes) {
    const double v = node.summary ? (*node.summary).*field : kReportNaN;
    if (!std::isnan(v) && (std::isnan(best) || sign * v > sign * best)) best = v;
  }
  return best;
}

double SummaryMax(const MethodRun& m, double NodeSummary::*field) { return SummaryExtreme(m, field, 1.0); }


}  // namespace

std::string FixedCell(double v, int decimals) {
  if (std::isnan(v) || std::isinf(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

namespace {

// "82", or "180-304" when the nodes trained different numbers of steps.
std::string Range(double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi)) return "-";
  return lo == hi ? FixedCell(lo, 0) : FixedCell(lo, 0) + "-" + FixedCell(hi, 0);
}

std::string General(double v) {
  if (std::isnan(v) || std::isinf(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}


nlohmann::json JsonNumber(double v) {
  if (std::isnan(v) || std::isinf(v)) return nullptr;
  return v;
}

// Machine names of the columns, in TableHeadings() order after "method"
// (the steps range is two: steps_min and steps_max).
const char* const kKeys[] = {"final_accuracy",         "time_to_target_s", "bytes_to_target_per_node",
                             "epochs_to_target",       "train_seconds",    "bytes_sent_per_node",
                             "samples_per_s_per_node", "efficiency",       "consensus_distance_after",
                             "steps_min",              "steps_max"};

std::vector<double> RowValues(const TableRow& r) {
  return {r.final_accuracy, r.time_to_target_s, r.bytes_to_target, r.epochs_to_target,        r.train_seconds,
          r.bytes_sent,     r.samples_per_s,    r.efficiency,      r.consensus_distance_after,
          r.steps_min,      r.steps_max};
}

}  // namespace

// A CSV field, quoted when it holds a comma, quote or line break.
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

TableRow ComputeTableRow(const MethodRun& method, const MethodCurves& curves, double target_accuracy) {
  TableRow row;
  row.method = method.name;
  row.label = method.label.empty() ? method.name : method.label;
  row.family = method.family;
  row.nodes = static_cast<int>(method.nodes.size());
  row.final_accuracy = SummaryMean(method, &NodeSummary::test_accuracy);
  // Nodes that evaluate at different steps: the time-merged curve, so that a
  // straggler's late evaluations do not define when the others got there.
  // Lock-step nodes (every point's nodes at one step): the order-grouped curve,
  // one whole evaluation round a point. Merged by time, the first node's new
  // evaluation averaged with the others' previous ones can cross the target a
  // moment before the round completes, with the previous round's bytes.
  const bool lock_step = !curves.accuracy.empty() &&
                         std::all_of(curves.accuracy.begin(), curves.accuracy.end(),
                                     [](const CurvePoint& p) { return p.step >= 0; });
  const std::vector<CurvePoint>& accuracy =
      lock_step || curves.accuracy_by_time.empty() ? curves.accuracy : curves.accuracy_by_time;
  for (const CurvePoint& p : accuracy) {
    if (p.value >= target_accuracy) {
      row.time_to_target_s = p.time_s;
      row.bytes_to_target = p.bytes_per_node;
      row.epochs_to_target = p.epochs;
      break;
    }
  }
  row.train_seconds = SummaryMax(method, &NodeSummary::train_seconds);
  row.bytes_sent = SummaryMean(method, &NodeSummary::bytes_sent);
  row.samples_per_s = SummaryMean(method, &NodeSummary::samples_per_s);
  row.consensus_distance_after = SummaryMean(method, &NodeSummary::consensus_distance_after);
  row.steps_min = SummaryExtreme(method, &NodeSummary::steps, -1.0);
  row.steps_max = SummaryExtreme(method, &NodeSummary::steps, 1.0);

  // e = T / (S x N), T = sum over nodes of samples_per_s: only when every node has it.
  const double s = method.single_node_samples_per_s;
  if (!std::isnan(s) && s > 0 && !method.nodes.empty()) {
    double total = 0.0;
    bool complete = true;
    for (const NodeRun& node : method.nodes) {
      if (!node.summary || std::isnan(node.summary->samples_per_s)) {
        complete = false;
        break;
      }
      total += node.summary->samples_per_s;
    }
    if (complete) row.efficiency = total / (s * static_cast<double>(method.nodes.size()));
  }
  return row;
}

bool ShowsConsensus(const TableRow& row) { return std::isfinite(row.consensus_distance_after); }

std::vector<std::string> TableHeadings() {
  return {"method",           "final acc (%)",       "time to target (s)",    "bytes to target /node (MB)",
          "epochs to target", "train time (s)",      "bytes sent /node (MB)", "samples/s /node",
          "efficiency e",     "consensus dist after", "steps /node"};
}

std::vector<std::string> TableCells(const TableRow& r) {
  return {r.label,
          FixedCell(r.final_accuracy * 100.0, 2),
          FixedCell(r.time_to_target_s, 2),
          FixedCell(r.bytes_to_target / 1e6, 2),
          FixedCell(r.epochs_to_target, 2),
          FixedCell(r.train_seconds, 2),
          FixedCell(r.bytes_sent / 1e6, 2),
          FixedCell(r.samples_per_s, 0),
          FixedCell(r.efficiency, 3),
          General(r.consensus_distance_after),
          Range(r.steps_min, r.steps_max)};
}

std::string FormatTableText(const std::vector<TableRow>& rows) {
  std::vector<std::vector<std::string>> lines = {TableHeadings()};
  for (const TableRow& r : rows) lines.push_back(TableCells(r));
  return AlignedText(lines);
}

std::string AlignedText(const std::vector<std::vector<std::string>>& lines) {
  if (lines.empty()) return "";
  std::vector<size_t> widths(lines.front().size(), 0);
  for (const auto& cells : lines) {
    for (size_t c = 0; c < cells.size(); ++c) widths[c] = std::max(widths[c], cells[c].size());
  }
  std::ostringstream out;
  for (const auto& cells : lines) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(widths[c] - cells[c].size(), ' ');
      // The method column is left-aligned, figures right-aligned.
      line += c == 0 ? cells[c] + pad : "  " + pad + cells[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
  return out.str();
}

std::string TableToCsv(const std::vector<TableRow>& rows) {
  std::ostringstream out;
  out << "method,label,family,nodes";
  for (const char* key : kKeys) out << ',' << key;
  out << '\n';
  for (const TableRow& r : rows) {
    out << CsvField(r.method) << ',' << CsvField(r.label) << ',' << CsvField(r.family) << ',' << r.nodes;
    for (double v : RowValues(r)) out << ',' << CsvNumber(v);
    out << '\n';
  }
  return out.str();
}

nlohmann::json TableToJson(const std::vector<TableRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const TableRow& r : rows) {
    nlohmann::json row = {{"method", r.method}, {"label", r.label}, {"family", r.family}, {"nodes", r.nodes}};
    const std::vector<double> values = RowValues(r);
    for (size_t i = 0; i < values.size(); ++i) row[kKeys[i]] = JsonNumber(values[i]);
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace chorus::node
