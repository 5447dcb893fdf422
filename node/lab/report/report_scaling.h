// The scaling view: one set of methods run at several node counts (`chorus
// simulate --nodes 16,32,64,128`), each count's report table (table.json)
// gathered into one table and two plots against the node count: final
// accuracy, and bytes sent per node, one curve per method, so that a user
// sees where each method stops keeping up and what it pays for it.
//
// Files in the output folder: scaling.csv (method, label, nodes, then the
// report table's columns), scaling.txt (the console table), and
// scaling_accuracy.gp / scaling_bytes.gp with their SVGs.
//
// Must not: run a simulation or read runs (it takes the tables).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace chorus::node {

struct ScalingPoint {
  int nodes = 0;
  nlohmann::json table;  // the report's rows at this count (TableToJson)
};

struct ScalingView {
  std::string table_text;              // methods by node count: final accuracy (%) / MB per node
  std::vector<std::string> svg_paths;  // plots drawn
  std::vector<std::string> warnings;
};

// The table as text: a row per method (in the first point's order, then any
// new ones), two columns per node count.
std::string ScalingTableText(const std::vector<ScalingPoint>& points);

// Writes the files into `out_dir` and draws the plots with `gnuplot` unless
// `render` is false (a missing gnuplot is a warning, not an error).
[[nodiscard]] Result<ScalingView> WriteScalingView(const std::string& out_dir, const std::vector<ScalingPoint>& points,
                                                   bool render, const std::string& gnuplot = "gnuplot");

}  // namespace chorus::node
