// `chorus report DIR... [--out DIR] [--target 0.85] [--no-plots]`: builds the
// report of a comparison or of a set of runs (report.h), prints the table, the
// notes and "report: <path>".
//
// Must not: do work at registration time (only in the callback), or compute
// anything itself (BuildReport does).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/lab/report/report.h"

namespace chorus::node {

void RegisterReportCommand(CLI::App& app, CliContext& context) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Plots and a table (report.html) from a comparison directory or from run directories");
  struct Args {
    std::vector<std::string> inputs;
    std::string out;
    double target = -1;
    bool no_plots = false;
    std::string gnuplot = "gnuplot";
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("dirs", args->inputs,
                  "A comparison directory (runs/<name>, from `chorus compare`) or run directories "
                  "(runs/<run>, node folders inside); several are compared")
      ->required();
  cmd->add_option("--out", args->out,
                  "Where report.html and report/ go (default: the comparison directory, or "
                  "runs/report-<time> next to the first run)");
  cmd->add_option(
         "--target", args->target,
         "Target test accuracy for \"time to target\", a fraction (default: compare.json's, else 0.85)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--no-plots", args->no_plots, "Write the gnuplot scripts and data but do not run gnuplot");
  cmd->add_option("--gnuplot", args->gnuplot, "The gnuplot program")->capture_default_str();
  cmd->callback([args, &context] {
    ReportOptions options;
    options.inputs = args->inputs;
    options.output_dir = args->out;
    options.target_accuracy = args->target;
    options.render_plots = !args->no_plots;
    options.gnuplot = args->gnuplot;
    Result<ReportResult> report = BuildReport(options);
    if (!report) {
      const StatusCode code = report.error().code();
      const bool bad_input = code == StatusCode::kNotFound || code == StatusCode::kInvalidArgument ||
                             code == StatusCode::kDataLoss;
      context.exit_code = CommandError("report", report.error().message(), bad_input ? kExitUsage : kExitFailure);
      return;
    }
    PrintReport(*report);
    context.exit_code = kExitOk;
  });
}

}  // namespace chorus::node
