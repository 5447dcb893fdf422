// report.html of `chorus report`: one self-contained page (inline CSS, inline
// SVG plots, no scripts, no network) with the comparison's settings, the
// methods, the table, the plots with captions and the notes.
//
// Must not: read files, run processes or compute figures; let any text taken
// from files reach the page unescaped.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "node/lab/report/report_data.h"
#include "node/lab/report/report_environment.h"
#include "node/lab/report/report_plots.h"
#include "node/lab/report/report_table.h"

namespace chorus::node {

struct HtmlReportInputs {
  std::string title;
  std::string generated_at;         // local time, "2025-01-31 12:00:00"
  std::vector<std::string> inputs;  // the directories read
  nlohmann::json settings;          // compare.json, or null
  RunEnvironment environment;       // host, cores, threads per node
  double target_accuracy = 0.85;
  const std::vector<MethodRun>* methods = nullptr;
  std::vector<TableRow> rows;
  std::vector<Plot> plots;
  std::vector<std::string> notes;  // warnings, shown as a list
  std::string files_note;          // where the CSV/JSON/scripts are
};

std::string RenderReportHtml(const HtmlReportInputs& in);

// &, <, >, " and ' as entities.
std::string HtmlEscape(std::string_view text);

// `svg` (a gnuplot SVG file) ready to sit inside HTML: the XML prolog and
// DOCTYPE dropped, scripts refused (empty result), and every id and reference
// to one prefixed with `id_prefix` so that several plots on a page do not share ids.
std::string InlineSvg(std::string_view svg, std::string_view id_prefix);

}  // namespace chorus::node
