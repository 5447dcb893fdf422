// `chorus compare FILE`: run a matrix of methods and report who wins (compare.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/lab/compare/compare.h"
#include "node/lab/compare/compare_config.h"

namespace chorus::node {

void RegisterCompareCommand(CLI::App& app, CliContext& context) {
  struct CompareArgs {
    std::string config_file = "configs/compare/default.toml";
    std::vector<std::string> sets;
    std::string methods;
    int nodes = 0;
    int epochs = 0;
    bool verbose = false;
    bool no_report = false;
  };
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Run gossip and all-reduce methods one after another on N local nodes each, with the same model, "
      "data, seed, epochs and global batch; write runs/<name>/report.html and print the table");
  cmd->add_option("config", args->config_file,
                  "Comparison file: a node config plus a [compare] table (default: configs/compare/default.toml)");
  cmd->add_option("--methods", args->methods,
                  "Comma-separated method names to run instead of the file's list (e.g. ring-allreduce,dpsgd-ring)");
  cmd->add_option("-n,--nodes", args->nodes, "Nodes per method instead of compare.nodes")->check(CLI::Range(1, 64));
  cmd->add_option("--epochs", args->epochs, "Same as --set train.epochs=N")->check(CLI::Range(1, 10000));
  cmd->add_option("--set", args->sets, "Override one node setting for every method (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_flag("-v,--verbose", args->verbose, "Show the nodes' lines instead of writing them to <method>/launch.log");
  cmd->add_flag("--no-report", args->no_report, "Only run; `chorus report runs/<name>` renders later");
  std::string builtin;
  for (const CompareMethod& m : BuiltinMethods()) builtin += (builtin.empty() ? "" : " ") + m.name;
  cmd->footer("Built-in methods: " + builtin +
              ".\nLink emulation ([compare] link = { bandwidth = \"1gbit\", latency = \"1ms\" }) needs root.");
  cmd->callback([args, &context] {
    CompareOptions options;
    options.config_path = args->config_file;
    const std::string epochs = args->epochs > 0 ? std::to_string(args->epochs) : "";
    options.overrides = CommandLineOverrides(args->sets, {{epochs, "train.epochs", "--epochs", false}});
    options.only_methods = SplitCommas(args->methods);
    options.nodes = args->nodes;
    options.verbose = args->verbose;
    options.report = !args->no_report;
    Result<CompareResult> result = RunCompare(options);
    if (!result) {
      const bool bad_input = result.error().code() == StatusCode::kInvalidArgument;
      context.exit_code = CommandError("compare", result.error().message(), bad_input ? kExitUsage : kExitFailure);
      return;
    }
    if (!result->table_text.empty()) std::printf("\n%s\n", result->table_text.c_str());
    if (!result->report_path.empty()) std::printf("report: %s\n", result->report_path.c_str());
    std::printf("raw data: %s/<method>/node<i>/metrics.jsonl, %s/compare.json\n", result->run_dir.c_str(),
                result->run_dir.c_str());
    int failed = 0;
    for (const CompareMethodOutcome& m : result->methods) failed += m.exit_code != 0;
    if (result->interrupted) {
      std::fprintf(stderr, "chorus compare: interrupted; the report covers the methods that ran\n");
      context.exit_code = kExitFailure;
    } else if (failed > 0) {
      std::fprintf(stderr, "chorus compare: %d method(s) failed (see their launch.log)\n", failed);
      context.exit_code = kExitFailure;
    } else {
      context.exit_code = kExitOk;
    }
  });
}

}  // namespace chorus::node
