// `chorus chaos CONFIG [--nodes 4] [--minutes 5] [--faults kill,stop,restart,partition]
// [--mtbf 20] [--seed 1] ...`: parses the options and runs chaos.h's RunChaos.
// Exits 0 when the cluster had no hang, no divergent replica, no node that
// ended by itself (a node the others removed rejoins by itself, so one that
// exits with an error or crashes is a failure) and a finished node; 1
// otherwise; 2 on bad options.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/config/config_parse.h"
#include "node/lab/chaos/chaos.h"

namespace chorus::node {
namespace {

// The fault kinds of --faults, and the nodes' configuration checked before
// any process starts: its first error names the file, line and key.
Status PrepareChaos(const std::string& faults, ChaosOptions* options) {
  CHORUS_ASSIGN_OR_RETURN(options->plan.kinds, ParseFaultKinds(faults));
  CHORUS_ASSIGN_OR_RETURN(const Config config,
                          LoadConfig(options->config_path, CommandLineOverrides(options->overrides)));
  options->base_lr = config.train.base_lr;
  return Status::Ok();
}

}  // namespace

void RegisterChaosCommand(CLI::App& app, CliContext& context) {
  struct ChaosArgs {
    std::string config_file;
    int nodes = 4;
    double minutes = 5.0;
    double train_minutes = 0.0;
    std::string faults = "kill,stop,restart";
    double mtbf = 20.0;
    uint64_t seed = 1;
    double hang_bound = 60.0;
    double baseline = 60.0;
    int min_running = 2;
    double max_freeze = 10.0;
    double max_partition = 15.0;
    double first_fault = 5.0;
    std::string output = "runs/chaos";
    std::vector<std::string> sets;
    bool verbose = false;
  };
  auto args = std::make_shared<ChaosArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chaos", "Train a local cluster while a seeded schedule kills, freezes and restarts its nodes; report how it coped");
  cmd->add_option("config", args->config_file, "TOML config every node starts from")->required();
  cmd->add_option("-n,--nodes", args->nodes, "Node processes")->check(CLI::Range(2, 64));
  cmd->add_option("--minutes", args->minutes, "Faults arrive for this long; training lasts about as long")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--train-minutes", args->train_minutes,
                  "Size the training to last this long without faults (default: --minutes); longer, it outlasts "
                  "the faults where they speed the cluster up (fewer nodes on few cores)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--faults", args->faults, "Comma-separated: kill (kill -9, sometimes two nodes), stop (SIGSTOP "
                                            "then SIGCONT), restart (a dead node rejoins), partition (a node cut off "
                                            "from the others, then joined again; root: nodes run in network "
                                            "namespaces)");
  cmd->add_option("--mtbf", args->mtbf, "Mean seconds between faults (exponential gaps)")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Seed of the schedule: the same seed, the same faults");
  cmd->add_option("--hang-bound", args->hang_bound, "Seconds without a trained step anywhere that count as a hang")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--baseline-seconds", args->baseline,
                  "Seconds of the fault-free run that measures the throughput to retain (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-running", args->min_running, "Nodes the schedule always leaves training")
      ->check(CLI::Range(1, 63));
  cmd->add_option("--max-freeze", args->max_freeze, "Longest SIGSTOP, seconds")->check(CLI::PositiveNumber);
  cmd->add_option("--max-partition", args->max_partition, "Longest partition, seconds")->check(CLI::PositiveNumber);
  cmd->add_option("--first-fault", args->first_fault, "Seconds after formation before faults may arrive")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", args->output, "Folder of the runs, chaos.jsonl and launch.log");
  cmd->add_option("--set", args->sets, "Override one setting on every node (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_flag("--verbose", args->verbose, "The nodes' lines to the console instead of launch.log");
  cmd->footer(
      "Examples:\n"
      "  chorus chaos configs/allreduce-ring.toml --minutes 10 --mtbf 20 --seed 7 --set train.base_lr=0.5\n"
      "  chorus chaos configs/gossip-pairwise.toml --faults kill,restart --set fabric.provider=\\\"net\\\"\n"
      "  sudo chorus chaos configs/gossip-dpsgd-ring.toml --faults kill,stop,restart,partition");
  cmd->callback([args, &context] {
    ChaosOptions options;
    options.config_path = args->config_file;
    options.overrides = args->sets;
    options.minutes = args->minutes;
    options.train_minutes = args->train_minutes;
    options.baseline_s = args->baseline;
    options.hang_bound_s = args->hang_bound;
    options.output_dir = args->output;
    options.verbose = args->verbose;
    options.plan.num_nodes = args->nodes;
    options.plan.mtbf_s = args->mtbf;
    options.plan.seed = args->seed;
    options.plan.min_running = args->min_running;
    options.plan.max_freeze_s = args->max_freeze;
    options.plan.max_partition_s = args->max_partition;
    options.plan.first_fault_s = args->first_fault;
    if (Status prepared = PrepareChaos(args->faults, &options); !prepared.ok()) {
      context.exit_code = CommandError("chaos", prepared.message(), kExitUsage);
      return;
    }
    Result<ChaosSummary> summary = RunChaos(options);
    if (!summary) {
      const bool usage = summary.error().code() == StatusCode::kInvalidArgument;
      context.exit_code = CommandError("chaos", summary.error().message(), usage ? kExitUsage : kExitFailure);
      return;
    }
    context.exit_code = summary->Passed() ? kExitOk : kExitFailure;
  });
}

}  // namespace chorus::node
