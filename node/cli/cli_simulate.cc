// `chorus simulate [CONFIG] [--nodes 128] [--methods a,b] [--epochs 1] [--batch 16]
// [--latency 50us] [--bandwidth 10gbit] [--out runs/sim-128] [--target 0.8] ...`:
// resolves the options, runs the simulation (simulate.h), then builds the report
// of the comparison directory it wrote and prints the table and its path.
//
// Must not: do work at registration time, or compute the table itself
// (BuildReport does, from the files, exactly as `chorus report` would).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/run/logging.h"
#include "node/lab/report/report.h"
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

}  // namespace

void RegisterSimulateCommand(CLI::App& app, CliContext& context) {
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Many virtual nodes (64 to 256) in one process over the local transport in virtual time, "
      "with a latency-bandwidth link model: the table of `chorus compare` past one machine");
  struct Args {
    std::string config_file;
    int nodes = 128;
    std::vector<std::string> methods = {"default"};
    std::string epochs, batch, train_samples;
    std::string latency = "50us", bandwidth = "10gbit";
    std::string out;
    double target = 0.8;
    std::string compute_time;
    double compute_scale = 1.0, compute_spread = 0.0;
    int eval_nodes = 4, evals = 4, eval_samples = 1000;
    double timeout_s = 600.0;
    std::vector<std::string> sets;
    std::string log_level = "warn";
    bool no_plots = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("config", args->config_file,
                  "TOML node config every virtual node starts from (model, lr, ...); default: the "
                  "built-in MLP with 2 epochs, batch 16 per node, base_lr 0.5, warmup_epochs 0.3");
  cmd->add_option("--nodes", args->nodes, "Virtual nodes per method")->capture_default_str()
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
  cmd->add_option("--latency", args->latency, "Link latency, e.g. 50us, 1ms")->capture_default_str();
  cmd->add_option("--bandwidth", args->bandwidth,
                  "Bandwidth of each node's NIC, e.g. 10gbit, 1gbit, 100mbit")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Comparison directory (default: runs/sim-<nodes>)");
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
  cmd->add_option("--eval-nodes", args->eval_nodes,
                  "Nodes that evaluate during training (spread over the ranks; all evaluate at the end)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--evals", args->evals, "Evaluation points during training")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--eval-samples", args->eval_samples, "Test images per evaluation")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--timeout", args->timeout_s, "Wall-clock deadline of any one wait, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--set", args->sets, "Override one node setting, e.g. --set train.base_lr=1.0 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--log-level", args->log_level, JoinNames(NamesOf(kLogLevelNames), ", ") + " (run.log_level)")
      ->capture_default_str();
  cmd->add_flag("--no-plots", args->no_plots, "Write the report's gnuplot scripts but do not run gnuplot");

  cmd->callback([args, &context] {
    auto usage = [&](const std::string& message) {
      std::fprintf(stderr, "chorus simulate: %s\n", message.c_str());
      context.exit_code = kExitUsage;
    };
    std::vector<ConfigOverride> overrides;
    if (args->config_file.empty()) {
      for (const char* d : kSimulateDefaults) overrides.push_back({d, "chorus simulate default"});
    }
    for (const std::string& s : args->sets) overrides.push_back({s, "--set " + s});
    auto flag = [&](const std::string& value, const char* key, const char* origin, bool is_string) {
      if (value.empty()) return;
      overrides.push_back({std::string(key) + "=" + (is_string ? TomlQuote(value) : value), origin});
    };
    flag(args->epochs, "train.epochs", "--epochs", false);
    flag(args->batch, "train.batch_size", "--batch", false);
    flag(args->train_samples, "data.train_limit", "--train-samples", false);
    flag(args->log_level, "run.log_level", "--log-level", true);
    Result<Config> config = LoadConfig(args->config_file, overrides);
    if (!config) return usage(config.error().message());

    SimulateOptions options;
    options.base = *config;
    options.nodes = args->nodes;
    Result<std::vector<CompareMethod>> methods = SimulateMethods(args->methods, args->nodes);
    if (!methods) return usage(methods.error().message());
    options.methods = std::move(*methods);
    options.out_dir = args->out.empty() ? "runs/sim-" + std::to_string(args->nodes) : args->out;
    options.target_accuracy = args->target;
    Result<double> latency = ParseDuration(args->latency);
    if (!latency) return usage("--latency: " + latency.error().message());
    Result<double> bandwidth = ParseBandwidth(args->bandwidth);
    if (!bandwidth) return usage("--bandwidth: " + bandwidth.error().message());
    options.latency = args->latency;
    options.latency_s = *latency;
    options.bandwidth = args->bandwidth;
    options.bytes_per_second = *bandwidth;
    if (!args->compute_time.empty()) {
      Result<double> compute = ParseDuration(args->compute_time);
      if (!compute) return usage("--compute-time: " + compute.error().message());
      if (!(*compute > 0)) return usage("--compute-time must be > 0");
      options.forward_backward_s = *compute;  // one block before the exchange
    }
    options.compute_scale = args->compute_scale;
    options.compute_spread = args->compute_spread;
    options.eval_nodes = args->eval_nodes;
    options.evals = args->evals;
    options.eval_samples = args->eval_samples;
    options.timeout_s = args->timeout_s;

    Result<std::unique_ptr<LogSession>> logging = InstallLogging(config->run, std::nullopt, "");
    if (!logging) {
      std::fprintf(stderr, "chorus simulate: %s\n", logging.error().message().c_str());
      context.exit_code = kExitFailure;
      return;
    }
    Result<SimulationResult> sim = RunSimulation(options);
    if (!sim) {
      std::fprintf(stderr, "chorus simulate: %s\n", sim.error().message().c_str());
      context.exit_code =
          sim.error().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
      return;
    }
    bool all_ok = true;
    for (const SimulatedMethod& m : sim->methods) all_ok = all_ok && m.exit_code == 0;

    ReportOptions report_options;
    report_options.inputs = {sim->out_dir};
    report_options.output_dir = sim->out_dir;
    report_options.target_accuracy = args->target;
    report_options.render_plots = !args->no_plots;
    Result<ReportResult> report = BuildReport(report_options);
    if (!report) {
      std::fprintf(stderr, "chorus simulate: the runs are in %s but the report failed: %s\n",
                   sim->out_dir.c_str(), report.error().message().c_str());
      context.exit_code = kExitFailure;
      return;
    }
    std::printf("\n%d virtual nodes, %s links with %s latency; time is virtual (seconds)\n",
                options.nodes, options.bandwidth.c_str(), options.latency.c_str());
    std::fputs(report->table_text.c_str(), stdout);
    for (const std::string& warning : report->warnings) std::fprintf(stderr, "note: %s\n", warning.c_str());
    std::printf("report: %s\n", report->html_path.c_str());
    std::fflush(stdout);
    context.exit_code = all_ok ? kExitOk : kExitFailure;
  });
}

}  // namespace chorus::node
