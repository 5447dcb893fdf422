// RunCli: the `chorus` command line (CLI11). Registers every subcommand and
// turns CLI11's exceptions into exit codes; the subcommands live in cli_*.cc.
#include "node/cli/cli.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/config/config_fields.h"

namespace chorus::node {
namespace {

// The first argument when it is meant as a subcommand (not an option) and
// names none: an error that names it and the closest subcommand, else "".
std::string UnknownCommand(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') return "";
  const std::string given = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == given) return "";
    names.push_back(sub->get_name());
  }
  std::string message = "chorus: unknown command '" + given + "'";
  if (std::optional<std::string> near = Closest(given, names)) message += "; did you mean '" + *near + "'?";
  return message + " (chorus --help lists the commands)";
}

// The whole `chorus` app: every subcommand registered on `app`, whose
// callbacks set `context`'s exit code.
void BuildApp(CLI::App& app, CliContext& context) {
  app.set_version_flag("--version", std::string("chorus ") + CHORUS_VERSION, "Print the version and exit");
  app.require_subcommand(1);
  app.footer("Exit status: 0 success, 1 failure while running, 2 bad usage or configuration.");
  RegisterNodeCommand(app, context);
  RegisterConfigCommand(app, context);
  RegisterClusterCommand(app, context);
  RegisterLaunchCommand(app, context);
  RegisterBenchCommands(app, context);
  RegisterReportCommand(app, context);
  RegisterCompareCommand(app, context);
  RegisterSimulateCommand(app, context);
  RegisterChaosCommand(app, context);
  RegisterCredentialCommands(app, context);
}

// The flags of `app`'s subcommands, depth first, into *out (`path`: the words before them).
void CollectFlags(CLI::App& app, const std::string& path, std::vector<CommandFlags>* out) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    CommandFlags command{path.empty() ? sub->get_name() : path + " " + sub->get_name(), {}};
    for (const CLI::Option* option : sub->get_options()) {
      if (!option->nonpositional() || option == sub->get_help_ptr()) continue;
      for (const std::string& name : option->get_snames()) command.flags.push_back("-" + name);
      for (const std::string& name : option->get_lnames()) command.flags.push_back("--" + name);
    }
    if (!command.flags.empty()) out->push_back(command);
    CollectFlags(*sub, command.command, out);
  }
}

const char kAppDescription[] = "Chorus: a decentralized, peer-to-peer data-parallel training node.";

}  // namespace

std::vector<CommandFlags> DescribeCommandFlags() {
  CLI::App app(kAppDescription, "chorus");
  CliContext context;
  BuildApp(app, context);
  std::vector<CommandFlags> out;
  CollectFlags(app, "", &out);
  return out;
}

int RunCli(int argc, char** argv) {
  CLI::App app(kAppDescription, "chorus");
  CliContext context;
  BuildApp(app, context);

  if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "%s\n", unknown.c_str());
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Prints help, the version, or the usage error; --help and --version are code 0.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return context.exit_code;
}

}  // namespace chorus::node
