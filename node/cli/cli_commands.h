// Subcommands of the `chorus` binary: one Register*Command per subcommand, each
// in its own cli_<name>.cc, all called from RunCli (cli.cc). A subcommand's
// callback stores its exit code in the CliContext. Registration only declares
// options; the work happens in the callback, after parsing.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "node/config/config.h"

namespace CLI {
class App;
}  // namespace CLI

namespace chorus::node {

struct CliContext {
  int exit_code = 0;  // set by the callback of the subcommand that ran
};

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work itself failed (logged)
inline constexpr int kExitUsage = 2;    // bad command line or configuration

// `chorus node [CONFIG]` (cli_node.cc).
void RegisterNodeCommand(CLI::App& app, CliContext& context);
// `chorus config check FILE` (cli_config.cc).
void RegisterConfigCommand(CLI::App& app, CliContext& context);
// `chorus cluster [CONFIG]`: form a cluster without training (cli_cluster.cc).
void RegisterClusterCommand(CLI::App& app, CliContext& context);
// `chorus launch -n N CONFIG`: N local nodes (cli_cluster.cc, launcher.h).
void RegisterLaunchCommand(CLI::App& app, CliContext& context);
// `chorus bench p2p` and `chorus bench allreduce` (cli_bench.cc, bench_p2p.h,
// bench_allreduce.h); other benchmarks add their subcommand under the same
// `bench` command.
void RegisterBenchCommands(CLI::App& app, CliContext& context);
// `chorus report DIR...`: report.html from a comparison or runs (cli_report.cc, report.h).
void RegisterReportCommand(CLI::App& app, CliContext& context);
// `chorus compare FILE`: a matrix of methods and the report (cli_compare.cc, compare.h).
void RegisterCompareCommand(CLI::App& app, CliContext& context);
// `chorus simulate [CONFIG]`: many virtual nodes in virtual time (cli_simulate.cc, simulate.h).
void RegisterSimulateCommand(CLI::App& app, CliContext& context);
// `chorus credential issuer|issue|show`: per-node credentials (cli_credential.cc, credentials.h).
void RegisterCredentialCommands(CLI::App& app, CliContext& context);
// `chorus chaos CONFIG`: a local cluster under a seeded schedule of faults (cli_chaos.cc, chaos.h).
void RegisterChaosCommand(CLI::App& app, CliContext& context);

}  // namespace chorus::node
