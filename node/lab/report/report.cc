// BuildReport and LoadReportData (see report.h): the order of the work
// (load, curves, table, files, plots, page) and where each file goes.
//
// Must not: parse metrics, compute figures, draw or format HTML itself (the
// report_* files do); fail for a gnuplot problem.
#include "node/lab/report/report.h"

#include <cmath>
#include <ctime>
#include <filesystem>

#include "common/files.h"
#include "node/outputs/metrics.h"
#include "node/lab/report/report_html.h"
#include "node/lab/report/report_plots.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

std::string LocalTime(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

std::string DefaultOutputDir(const ReportOptions& options, const RunSet& runs) {
  if (runs.first_input_is_comparison) return options.inputs.front();
  // Next to the first run: its parent folder (absolute, so that "." works too).
  std::error_code ec;
  fs::path first = fs::absolute(options.inputs.front(), ec).lexically_normal();
  if (!first.has_filename()) first = first.parent_path();
  return (first.parent_path() / ("report-" + LocalTime("%Y%m%d-%H%M%S"))).string();
}

}  // namespace

Result<ReportData> LoadReportData(const std::vector<std::string>& inputs, double target_accuracy) {
  if (std::isnan(target_accuracy) || target_accuracy > 1.0) {
    return Err(InvalidArgument("target accuracy " + std::to_string(target_accuracy) +
                               " is not a fraction in [0, 1] (0.85 means 85%)"));
  }
  ReportData data;
  CHORUS_ASSIGN_OR_RETURN(data.runs, LoadRunSet(inputs));
  if (target_accuracy >= 0) {
    data.target_accuracy = target_accuracy;
  } else if (std::isfinite(data.runs.target_accuracy) && data.runs.target_accuracy >= 0 &&
             data.runs.target_accuracy <= 1) {
    data.target_accuracy = data.runs.target_accuracy;
  } else {
    data.target_accuracy = kDefaultTargetAccuracy;
  }
  data.environment = DescribeEnvironment(data.runs);
  for (const MethodRun& method : data.runs.methods) {
    data.curves.push_back(BuildMethodCurves(method, &data.runs.warnings));
    data.rows.push_back(ComputeTableRow(method, data.curves.back(), data.target_accuracy));
  }
  return data;
}

Result<ReportResult> BuildReport(const ReportOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(ReportData data, LoadReportData(options.inputs, options.target_accuracy));

  ReportResult result;
  const std::string output_dir =
      options.output_dir.empty() ? DefaultOutputDir(options, data.runs) : options.output_dir;
  result.report_dir = (fs::path(output_dir) / "report").string();
  result.html_path = (fs::path(output_dir) / "report.html").string();
  std::error_code ec;
  fs::create_directories(result.report_dir, ec);
  if (ec) return Err(Internal("cannot create " + result.report_dir + ": " + ec.message()));

  result.table_text = FormatTableText(data.rows);
  if (data.runs.settings.is_object() && data.runs.settings.contains("single_node")) {
    result.environment_text =
        "Single-node baseline: " + SingleNodeBaselineText(data.runs.settings["single_node"]) + "\n";
  }
  result.environment_text += EvaluationPointsText(data.runs.settings);
  result.environment_text += "Ran on: " + EnvironmentLine(data.environment) + "\n";
  result.table = TableToJson(data.rows);
  nlohmann::json table_file = {{"title", data.runs.title},
                               {"target_accuracy", data.target_accuracy},
                               {"inputs", options.inputs},
                               {"rows", result.table}};
  CHORUS_RETURN_IF_ERROR(WriteSummary((fs::path(result.report_dir) / "table.json").string(), table_file));
  CHORUS_RETURN_IF_ERROR(
      WriteFileAtomic((fs::path(result.report_dir) / "table.csv").string(), AsBytes(TableToCsv(data.rows))));

  CHORUS_ASSIGN_OR_RETURN(std::vector<Plot> plots, WritePlotFiles(result.report_dir, data.runs.methods,
                                                                  data.curves, data.rows, data.target_accuracy));
  // A `chorus chaos` folder: its throughput and membership against time.
  for (const std::string& input : options.inputs) {
    const fs::path chaos = fs::path(input) / "chaos.jsonl";
    if (!fs::exists(chaos, ec)) continue;
    CHORUS_ASSIGN_OR_RETURN(Plot plot, WriteChaosPlot(result.report_dir, chaos.string()));
    plots.insert(plots.begin(), std::move(plot));
  }
  result.warnings = data.runs.warnings;
  if (options.render_plots) {
    RenderPlots(options.gnuplot, result.report_dir, options.gnuplot_timeout_s, &plots, &result.warnings);
  } else {
    for (Plot& plot : plots) {
      if (!plot.script_path.empty()) {
        plot.note =
            "plots not drawn (--no-plots); run gnuplot " + plot.spec.id + ".gp in " + result.report_dir;
      }
    }
  }
  for (const Plot& plot : plots) {
    if (!plot.svg.empty()) result.svg_paths.push_back(plot.svg_path);
  }

  HtmlReportInputs page;
  page.title = data.runs.title;
  page.generated_at = LocalTime("%Y-%m-%d %H:%M:%S");
  page.inputs = options.inputs;
  page.settings = data.runs.settings;
  page.environment = data.environment;
  page.target_accuracy = data.target_accuracy;
  page.methods = &data.runs.methods;
  page.rows = data.rows;
  page.plots = std::move(plots);
  page.notes = result.warnings;
  page.files_note = "The data behind this page is in " + result.report_dir +
                    ": table.csv and table.json (the table in raw units: accuracy as a fraction, bytes), "
                    "curves.csv (every point of every curve), and one gnuplot script per plot (*.gp) "
                    "with the SVG it draws.";
  CHORUS_RETURN_IF_ERROR(WriteFileAtomic(result.html_path, AsBytes(RenderReportHtml(page))));
  return result;
}

}  // namespace chorus::node
