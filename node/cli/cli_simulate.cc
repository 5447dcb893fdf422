// `chorus simulate [CONFIG] [--nodes 128 | --nodes 16,32,64,128] [--methods a,b] [--epochs 1] [--batch 16]
// [--latency 50us] [--bandwidth 10gbit] [--speeds 1,1,1,0.25] [--batch-sizes 16,32]
// [--out runs/sim-128] [--target 0.8] ...`:
// resolves the options, runs the simulation (simulate.h), then builds the report
// of the comparison directory it wrote and prints the table and its path.
//
// Must not: do work at registration time, or compute the table itself
// (BuildReport does, from the files, exactly as `chorus report` would).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/run/logging.h"
#include "node/lab/report/report.h"
#include "node/lab/report/report_scaling.h"
#include "node/lab/simulate/simulate.h"
#include "node/config/units.h"

namespace chorus::node {
namespace {

// Node settings without a CONFIG: 2 epochs of batch 16 per node. The built-in
// lr (2.0 per 256 samples, 1 epoch of warm-up) is tuned for 937 steps per
// epoch; at 128 nodes an epoch is 29 steps of global batch 2048, and a 128-node
// ring all-reduce reached 40% test accuracy with it against 84% with these.
constexpr const char* kSimulateDefaults[] = {"train.epochs=2", "train.batch_size=16",
                                             "train.base_lr=0.5", "train.warmup_epochs=0.3"};

struct SimulateArgs {
  std::string config_file;
  std::vector<int> nodes = {128};  // several: one simulation each, and the scaling view
  std::vector<std::string> methods = {"default"};
  std::string epochs, batch, train_samples;
  std::string latency = "50us", bandwidth = "10gbit";
  int sites = 1;
  std::string site_link = "100mbit 50ms";
  std::string out;
  double target = 0.8;
  std::string compute_time;
  double compute_scale = 1.0, compute_spread = 0.0;
  std::vector<double> speeds;
  std::vector<int> batch_sizes;
  double exchange_cpu_scale = 1.0;
  bool exact_lars_norm = false;
  int eval_nodes = 4, evals = 0, eval_samples = 1000;
  double timeout_s = 600.0;
  std::vector<std::string> sets;
  std::string log_level = "warn";
  bool no_plots = false;
};

// The link model: each node's NIC, and the sites.
void AddSimulateLinkOptions(CLI::App* cmd, SimulateArgs* args) {
  cmd->add_option("--latency", args->latency, "Link latency, e.g. 50us, 1ms")->capture_default_str();
  cmd->add_option("--bandwidth", args->bandwidth,
                  "Bandwidth of each node's NIC, e.g. 10gbit, 1gbit, 100mbit")
      ->capture_default_str();
  cmd->add_option("--sites", args->sites,
                  "Sites: node i in site i % N (cluster.site), joined by --site-link (1: one site)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--site-link", args->site_link, "The link between sites: \"<bandwidth> [<latency>]\"")
      ->capture_default_str();
}

// Who evaluates during training, how often, on how many test images.
void AddEvaluationOptions(CLI::App* cmd, SimulateArgs* args) {
  cmd->add_option("--eval-nodes", args->eval_nodes,
                  "Nodes that evaluate during training (spread over the ranks; all evaluate at the end)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--evals", args->evals,
                  "Evaluation points during training (time to target is the first at or above it); 0: four per "
                  "epoch")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-samples", args->eval_samples, "Test images per evaluation")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
}

void AddSimulateOptions(CLI::App* cmd, SimulateArgs* args) {
  cmd->add_option("config", args->config_file,
                  "TOML node config every virtual node starts from (model, lr, ...); default: the "
                  "built-in MLP with 2 epochs, batch 16 per node, base_lr 0.5, warmup_epochs 0.3");
  cmd->add_option("--nodes", args->nodes,
                  "Virtual nodes per method; several (16,32,64,128): one simulation each in <out>/n<N>, then "
                  "the scaling view (<out>/scaling.txt, scaling.csv, accuracy and bytes per node against N)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(2, 4096));
  cmd->add_option("--methods", args->methods,
                  "Comma-separated methods: built-in compare methods (ring-allreduce, tree-allreduce, "
                  "halving-doubling-allreduce, dpsgd-ring, dpsgd-one-peer-exp, push-sum-one-peer-exp, choco-sign, "
                  "choco-topk, ...) or local-sgd-hypercube; \"default\" is the default list")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--epochs", args->epochs, "Epochs (train.epochs; default 2 without CONFIG)")
      ->type_name("N");
  cmd->add_option("--batch", args->batch, "Batch per node (train.batch_size; default 16 without CONFIG)")
      ->type_name("N");
  cmd->add_option("--train-samples", args->train_samples,
                  "Train on the first N images only (data.train_limit; 0: all 60000)")
      ->type_name("N");
  AddSimulateLinkOptions(cmd, args);
  cmd->add_option("--out", args->out, "Comparison directory (default: runs/sim-<nodes>, or runs/sim-scaling)");
  cmd->add_option("--target", args->target, "Target test accuracy for \"time to target\" (fraction)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--compute-time", args->compute_time,
                  "Modelled compute per step, e.g. 4ms (default: measured once on one thread)")
      ->type_name("DURATION");
  cmd->add_option("--compute-scale", args->compute_scale,
                  "Multiply the compute time per step (e.g. 0.1: a 10x faster device)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--compute-spread", args->compute_spread,
                  "Heterogeneity: node i computes 1 + SPREAD * i / (nodes - 1) times slower")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--speeds", args->speeds,
                  "Comma-separated node speeds, repeated over the nodes: node i computes at speed "
                  "SPEEDS[i mod count] (1: as measured, 0.25: 4x slower, 2: twice as fast); e.g. 1,1,1,0.25 "
                  "makes every fourth node 4x slower")
      ->delimiter(',')
      ->type_name("S,...")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-sizes", args->batch_sizes,
                  "Comma-separated batches per node, repeated over the nodes: node i trains batch "
                  "SIZES[i mod count] (train.batch_size; its compute is measured at that batch)")
      ->delimiter(',')
      ->type_name("B,...")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--exchange-cpu-scale", args->exchange_cpu_scale,
                  "Multiply the exchanges' measured CPU time (codecs, sums, averaging) charged to the "
                  "virtual clocks; 0: only bytes and latency cost time, and virtual times repeat exactly")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--exact-lars-norm", args->exact_lars_norm,
                "LARS's trust ratio on every node from the norm of all nodes' mean gradient, as an "
                "all-reduce node sees it (lock-step methods; the times are then not comparable)");
  AddEvaluationOptions(cmd, args);

  cmd->add_option("--timeout", args->timeout_s, "Wall-clock deadline of any one wait, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--set", args->sets, "Override one node setting, e.g. --set train.base_lr=1.0 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--log-level", args->log_level, JoinNames(NamesOf(kLogLevelNames), ", ") + " (run.log_level)")
      ->capture_default_str();
  cmd->add_flag("--no-plots", args->no_plots, "Write the report's gnuplot scripts but do not run gnuplot");
}

// The node settings: the defaults without a CONFIG, then --set, then the
// dedicated flags.
std::vector<ConfigOverride> SimulateOverrides(const SimulateArgs& args) {
  std::vector<ConfigOverride> overrides;
  if (args.config_file.empty()) {
    for (const char* d : kSimulateDefaults) overrides.push_back({d, "chorus simulate default"});
  }
  const std::vector<ConfigOverride> given =
      CommandLineOverrides(args.sets, {{args.epochs, "train.epochs", "--epochs", false},
                                       {args.batch, "train.batch_size", "--batch", false},
                                       {args.train_samples, "data.train_limit", "--train-samples", false},
                                       {args.log_level, "run.log_level", "--log-level", true}});
  overrides.insert(overrides.end(), given.begin(), given.end());
  return overrides;
}

// SimulateOptions from the flags and the nodes' `config`; errors are the
// command line's, worded for it.
Result<SimulateOptions> SimulateOptionsFrom(const SimulateArgs& args, const Config& config, int nodes,
                                            const std::string& out_dir) {
  SimulateOptions options;
  options.base = config;
  options.nodes = nodes;
  Result<std::vector<CompareMethod>> methods = SimulateMethods(args.methods, nodes);
  if (!methods) return Err(InvalidArgument(methods.error().message()));
  options.methods = std::move(*methods);
  options.out_dir = out_dir;
  options.target_accuracy = args.target;
  Result<double> latency = ParseDuration(args.latency);
  if (!latency) return Err(InvalidArgument("--latency: " + latency.error().message()));
  Result<double> bandwidth = ParseBandwidth(args.bandwidth);
  if (!bandwidth) return Err(InvalidArgument("--bandwidth: " + bandwidth.error().message()));
  options.latency = args.latency;
  options.latency_s = *latency;
  options.bandwidth = args.bandwidth;
  options.bytes_per_second = *bandwidth;
  options.sites = args.sites;
  if (args.sites > 1) {
    Result<LinkText> site_link = ParseLinkText(args.site_link);
    if (!site_link) return Err(InvalidArgument("--site-link: " + site_link.error().message()));
    options.site_link = args.site_link;
    options.site_bytes_per_second = site_link->bytes_per_s;
    options.site_latency_s = site_link->latency_s;
  }
  if (!args.compute_time.empty()) {
    Result<double> compute = ParseDuration(args.compute_time);
    if (!compute) return Err(InvalidArgument("--compute-time: " + compute.error().message()));
    if (!(*compute > 0)) return Err(InvalidArgument("--compute-time must be > 0"));
    options.forward_backward_s = *compute;  // one block before the exchange
  }
  options.compute_scale = args.compute_scale;
  options.compute_spread = args.compute_spread;
  options.speeds = args.speeds;
  options.batch_sizes = args.batch_sizes;
  options.exchange_cpu_scale = args.exchange_cpu_scale;
  options.exact_lars_norm = args.exact_lars_norm;
  options.eval_nodes = args.eval_nodes;
  options.evals = args.evals;
  options.eval_samples = args.eval_samples;
  options.timeout_s = args.timeout_s;
  return options;
}

// Builds the report of the comparison directory the simulation wrote.
Result<ReportResult> BuildSimulationReport(const SimulateArgs& args, const SimulationResult& sim) {
  ReportOptions report_options;
  report_options.inputs = {sim.out_dir};
  report_options.output_dir = sim.out_dir;
  report_options.target_accuracy = args.target;
  report_options.render_plots = !args.no_plots;
  return BuildReport(report_options);
}

// One simulation at `nodes` into `out_dir`, its report built and printed.
// Returns the exit status and, through `table`, the report's rows.
int RunOneSimulation(const SimulateArgs& args, const Config& config, int nodes, const std::string& out_dir,
                     nlohmann::json* table) {
  constexpr std::string_view kCommand = "simulate";
  Result<SimulateOptions> options = SimulateOptionsFrom(args, config, nodes, out_dir);
  if (!options) return CommandError(kCommand, options.error().message(), kExitUsage);
  Result<SimulationResult> sim = RunSimulation(*options);
  if (!sim) {
    const bool bad_input = sim.error().code() == StatusCode::kInvalidArgument;
    return CommandError(kCommand, sim.error().message(), bad_input ? kExitUsage : kExitFailure);
  }
  Result<ReportResult> report = BuildSimulationReport(args, *sim);
  if (!report) {
    const std::string message = "the runs are in " + sim->out_dir + " but the report failed: ";
    return CommandError(kCommand, message + report.error().message(), kExitFailure);
  }
  std::printf("\n%d virtual nodes, %s links with %s latency; time is virtual (seconds)\n",
              options->nodes, options->bandwidth.c_str(), options->latency.c_str());
  PrintReport(*report);
  *table = report->table;
  const bool all_ok = std::all_of(sim->methods.begin(), sim->methods.end(),
                                  [](const SimulatedMethod& m) { return m.exit_code == 0; });
  return all_ok ? kExitOk : kExitFailure;
}

int RunSimulateCommand(const SimulateArgs& args) {
  constexpr std::string_view kCommand = "simulate";
  Result<Config> config = LoadConfig(args.config_file, SimulateOverrides(args));
  if (!config) return CommandError(kCommand, config.error().message(), kExitUsage);
  // Every count's methods are checked before the first simulation starts.
  for (int n : args.nodes) {
    Result<std::vector<CompareMethod>> methods = SimulateMethods(args.methods, n);
    if (!methods) return CommandError(kCommand, methods.error().message(), kExitUsage);
  }
  // Held to the end: the simulation and the report log through it.
  Result<std::unique_ptr<LogSession>> logging = InstallLogging(config->run, std::nullopt, "");
  if (!logging) return CommandError(kCommand, logging.error().message(), kExitFailure);
  if (args.nodes.size() == 1) {
    nlohmann::json table;
    const int n = args.nodes.front();
    return RunOneSimulation(args, *config, n, args.out.empty() ? "runs/sim-" + std::to_string(n) : args.out, &table);
  }
  const std::string out = args.out.empty() ? "runs/sim-scaling" : args.out;
  std::vector<ScalingPoint> points;
  int exit_code = kExitOk;
  for (int n : args.nodes) {
    ScalingPoint point;
    point.nodes = n;
    const int code = RunOneSimulation(args, *config, n, out + "/n" + std::to_string(n), &point.table);
    if (code == kExitUsage) return code;
    if (code != kExitOk) exit_code = code;
    points.push_back(std::move(point));
  }
  Result<ScalingView> view = WriteScalingView(out, points, !args.no_plots);
  if (!view) return CommandError(kCommand, "the scaling view failed: " + view.error().message(), kExitFailure);
  std::printf("\nScaling (final test accuracy and MB sent per node at each node count):\n%s",
              view->table_text.c_str());
  for (const std::string& w : view->warnings) std::printf("note: %s\n", w.c_str());
  std::printf("scaling view: %s/scaling.txt, scaling.csv%s\n", out.c_str(),
              view->svg_paths.empty() ? "" : ", scaling_accuracy.svg, scaling_bytes.svg");
  return exit_code;
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app, CliContext& context) {
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Many virtual nodes (64 to 256) in one process over the local transport in virtual time, "
      "with a latency-bandwidth link model: the table of `chorus compare` past one machine");
  auto args = std::make_shared<SimulateArgs>();
  AddSimulateOptions(cmd, args.get());
  cmd->callback([args, &context] { context.exit_code = RunSimulateCommand(*args); });
}

}  // namespace chorus::node
