// `chorus node [CONFIG]`: resolve the config (file, --set and the dedicated
// flags, environment hints), install logging, and hand over to RunNode.
// Training itself is RunNode's (run_node.h); nothing here touches the network.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/config/config_parse.h"
#include "node/control/credentials.h"
#include "node/run/logging.h"
#include "node/run/run_node.h"

namespace chorus::node {

void RegisterNodeCommand(CLI::App& app, CliContext& context) {
  struct NodeArgs {
    std::string config_file;
    bool resume = false;
    std::vector<std::string> sets;
    std::string run_name, output_dir, epochs, threads, log_level;
  };
  auto args = std::make_shared<NodeArgs>();
  CLI::App* node = app.add_subcommand("node", "Train as one node (one model replica) of a cluster");
  node->add_option("config", args->config_file, "TOML config file (default: the built-in single-node MLP)");
  node->add_flag("--resume", args->resume, "Continue from the latest checkpoint of this run and node");
  node->add_option("--run", args->run_name, "Run name: outputs go to OUTPUT/NAME/<node>/ (run.name)")
      ->type_name("NAME");
  node->add_option("--output", args->output_dir, "Folder holding the run folders (run.output_dir)")
      ->type_name("DIR");
  node->add_option("--epochs", args->epochs, "Number of training epochs (train.epochs)")->type_name("N");
  node->add_option("--threads", args->threads, "Compute threads, 1..256 (train.threads)")->type_name("N");
  node->add_option("--log-level", args->log_level, JoinNames(NamesOf(kLogLevelNames), ", ") + " (run.log_level)")
      ->type_name("LEVEL");
  node->add_option("--set", args->sets,
                   "Override one setting, e.g. --set train.batch_size=128 (repeatable; applied before "
                   "the flags above)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);

  node->callback([args, &context] {
    const std::vector<ConfigOverride> overrides =
        CommandLineOverrides(args->sets, {{args->run_name, "run.name", "--run", true},
                                          {args->output_dir, "run.output_dir", "--output", true},
                                          {args->epochs, "train.epochs", "--epochs", false},
                                          {args->threads, "train.threads", "--threads", false},
                                          {args->log_level, "run.log_level", "--log-level", true}});
    Result<Config> config = LoadConfig(args->config_file, overrides);
    if (config && config->run.node_name.empty() && !config->cluster.credential.empty()) {
      // A node with a credential uses its name (the control plane refuses any other).
      Result<std::string> name = CredentialName(config->cluster.credential);
      if (!name) config = Err(name.error().WithContext("cluster.credential"));
      if (name) config->run.node_name = *name;
    }
    if (!config) {
      context.exit_code = CommandError("node", config.error().message(), kExitUsage);
      return;
    }
    Result<std::unique_ptr<LogSession>> logging =
        InstallLogging(config->run, std::nullopt, config->run.node_name);
    if (!logging) {
      context.exit_code = CommandError("node", logging.error().message(), kExitFailure);
      return;
    }
    NodeOptions options;
    options.resume = args->resume;
    options.log_session = logging->get();
    std::vector<std::string> rejoin_through;
    options.rejoin_through = &rejoin_through;
    context.exit_code = RunNode(*config, options);
    if (context.exit_code == kRunNodeRejoins) {
      logging->reset();  // flushes the log file before this image is replaced
      const Status failed = RejoinAsNewProcess(rejoin_through);
      context.exit_code = CommandError("node", failed.message(), kExitFailure);
    }
  });
}

}  // namespace chorus::node
