// `chorus config check FILE`. Printing and exit codes only: parsing and
// checking rules live in node/config/.
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"

namespace chorus::node {

void RegisterConfigCommand(CLI::App& app, CliContext& context) {
  CLI::App* config = app.add_subcommand("config", "Work with node configuration files");
  config->require_subcommand(1);

  struct CheckArgs {
    std::string file;
    std::vector<std::string> sets;
  };
  auto args = std::make_shared<CheckArgs>();
  CLI::App* check = config->add_subcommand(
      "check",
      "Validate FILE as a starting node would, and print the resolved settings as TOML: every key, its "
      "value, and for keys written as names the values accepted");
  check->add_option("file", args->file, "TOML config file")->required();
  check->add_option("--set", args->sets, "Override one setting, e.g. --set train.batch_size=128 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  check->callback([args, &context] {
    Result<Config> loaded = LoadConfig(args->file, CommandLineOverrides(args->sets, {}));
    if (!loaded) {
      context.exit_code = CommandError("config check", loaded.error().message(), kExitUsage);
      return;
    }
    std::fputs(DescribeConfig(*loaded).c_str(), stdout);
    context.exit_code = kExitOk;
  });
}

}  // namespace chorus::node
