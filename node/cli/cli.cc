// RunCli: the `chorus` command line (CLI11). Registers every subcommand and
// turns CLI11's exceptions into exit codes; the subcommands live in cli_*.cc.
#include "node/cli/cli.h"

#include <string>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"

namespace chorus::node {

int RunCli(int argc, char** argv) {
  CLI::App app("Chorus: a decentralized, peer-to-peer data-parallel training node.", "chorus");
  app.set_version_flag("--version", std::string("chorus ") + CHORUS_VERSION, "Print the version and exit");
  app.require_subcommand(1);
  app.footer("Exit status: 0 success, 1 failure while running, 2 bad usage or configuration.");

  CliContext context;
  RegisterNodeCommand(app, context);
  RegisterConfigCommand(app, context);
  RegisterClusterCommand(app, context);
  RegisterLaunchCommand(app, context);
  RegisterBenchCommands(app, context);
  RegisterReportCommand(app, context);
  RegisterCompareCommand(app, context);
  RegisterSimulateCommand(app, context);
  RegisterChaosCommand(app, context);
  // Further subcommands register here, one function each: launch, bench (p2p,
  // allreduce), compare, report, simulate.

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Prints help, the version, or the usage error; --help and --version are code 0.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return context.exit_code;
}

}  // namespace chorus::node
