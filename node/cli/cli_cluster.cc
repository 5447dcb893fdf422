// `chorus cluster [CONFIG]` and `chorus launch -n N CONFIG`.
//
// `cluster` forms (or joins) a cluster without training: it starts the control
// plane with a placeholder data-plane address (or, with --fabric, the address of
// a real libfabric endpoint), prints the view, keeps heartbeating, logs epoch
// changes, calls AdvanceEpochIfPending at a fixed interval (as a training loop
// would at its epoch boundaries, so late joiners are admitted), and leaves
// cleanly after --hold seconds or on SIGINT/SIGTERM.
// `launch` runs N local node processes (launcher.h).
// Must not: hold membership logic (control_plane.h does) or parse TOML itself
// (LoadConfig does).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/log.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/cluster/cluster_session.h"
#include "node/config/config_parse.h"
#include "node/control/control_plane.h"
#include "node/launch/launcher.h"
#include "node/run/logging.h"
#include "node/run/stop_signals.h"

namespace chorus::node {
namespace {

struct ClusterArgs {
  std::string config_file;
  std::vector<std::string> sets;
  double hold_s = -1;          // < 0: until a signal
  double boundary_every_s = 1.0;
  bool fabric = false;
};

void PrintView(const MembershipView& view) {
  std::printf("cluster: epoch %llu, %d members, this node is rank %d\n",
              static_cast<unsigned long long>(view.epoch), view.size(), view.self_rank);
  for (const Member& m : view.members) {
    std::printf("  rank %d: %s at %s, %s, batch %d, host group %s, data address %zu bytes\n", m.rank,
                m.name.c_str(), m.control_address.c_str(), m.device.Name().c_str(), m.batch_size,
                m.host_group.c_str(), m.data_address.size());
  }
  std::fflush(stdout);
}

int RunCluster(const ClusterArgs& args) {
  Result<Config> config = LoadConfig(args.config_file, CommandLineOverrides(args.sets));
  if (!config) return CommandError("cluster", config.error().message(), kExitUsage);
  Result<std::unique_ptr<LogSession>> logging = InstallLogging(config->run, std::nullopt, config->run.node_name);
  if (!logging) return CommandError("cluster", logging.error().message(), kExitFailure);

  // SIGINT/SIGTERM while joining (which waits up to cluster.join_timeout_s
  // for the other nodes): exit at once; once a member (from the moment the
  // view forms, which is when `chorus launch` reports the cluster formed):
  // leave.
  StopRequest stop;
  StopWording wording{"while joining the cluster", "leaving the cluster", "exiting now, without leaving"};
  Status watching = stop.Start([log = logging->get()] { FlushForExit(log); }, std::move(wording));
  if (!watching.ok()) {
    CHORUS_LOG_ERROR(Subsys::kNode, watching.ToString());
    return kExitFailure;
  }

  Result<ClusterSession> session = JoinCluster(*config, args.fabric, /*resume=*/false, stop.before_exit(),
                                               [&stop] { stop.EnterStoppablePhase(); });
  if (!session) {
    CHORUS_LOG_ERROR(Subsys::kNode, session.error().ToString());
    return kExitFailure;
  }
  ControlPlane& cp = *session->control;
  const MembershipView* formed = &session->view;
  PrintView(*formed);

  const Deadline hold = args.hold_s >= 0 ? Deadline::AfterSeconds(args.hold_s) : Deadline::Never();
  const double boundary_deadline_s = std::min(10.0, 2 * config->cluster.dead_timeout_s);
  Deadline next_boundary = Deadline::AfterSeconds(args.boundary_every_s);
  int exit_code = kExitOk;
  while (true) {
    const double until_boundary = std::chrono::duration<double>(next_boundary.Remaining()).count();
    const double until_hold = hold.IsNever() ? until_boundary
                                             : std::chrono::duration<double>(hold.Remaining()).count();
    if (stop.WaitRequested(std::min(until_boundary, until_hold)) != 0) break;
    if (hold.Expired()) break;
    if (!next_boundary.Expired()) continue;
    Result<MembershipView> boundary = cp.AdvanceEpochIfPending(Deadline::AfterSeconds(boundary_deadline_s));
    if (!boundary) {
      CHORUS_LOG_DEBUG(Subsys::kNode, "epoch boundary: ", boundary.error().ToString());
    }
    if (cp.View().self_rank < 0) {
      CHORUS_LOG_ERROR(Subsys::kNode, "this node is no longer a cluster member");
      exit_code = kExitFailure;
      break;
    }
    next_boundary = Deadline::AfterSeconds(args.boundary_every_s);
  }
  if (exit_code == kExitOk) {
    Status left = cp.Leave(Deadline::AfterSeconds(config->cluster.dead_timeout_s + 2));
    if (!left.ok()) CHORUS_LOG_WARN(Subsys::kNode, left.ToString());
    CHORUS_LOG_INFO(Subsys::kNode, "left the cluster");
  }
  return exit_code;
}

// Every node's configuration as the launch will run it (the file, --set,
// then its --node-set), checked before any process starts: the first error,
// naming the file, line and key (and the node where its own settings differ).
Status CheckEveryNodeConfig(const LaunchOptions& options) {
  std::vector<ConfigOverride> shared = CommandLineOverrides(options.overrides);
  for (int node = 0; node < options.num_nodes; ++node) {
    std::vector<ConfigOverride> overrides = shared;
    bool own = false;
    for (const auto& [index, assignment] : options.node_overrides) {
      if (index != node) continue;
      overrides.push_back({assignment, "--node-set " + std::to_string(node) + ":" + assignment});
      own = true;
    }
    if (node > 0 && !own) continue;  // the same as node0's
    Result<Config> config = LoadConfig(options.config_path, overrides);
    if (!config) return config.error();
  }
  return Status::Ok();
}

// How the nodes ended, after all exited with status 0.
void PrintLaunchEnd(const LaunchOptions& options, const LaunchResult& result) {
  const auto started = std::count_if(result.exit_codes.begin(), result.exit_codes.end(), [](int c) { return c >= 0; });
  if (started == options.num_nodes) {
    std::fprintf(stderr, "launch: all %d nodes exited with status 0\n", options.num_nodes);
    return;
  }
  const int unstarted = options.num_nodes - static_cast<int>(started);
  std::fprintf(stderr, "launch: the %d nodes started exited with status 0; %d late node%s not started\n",
               static_cast<int>(started), unstarted, unstarted == 1 ? " was" : "s were");
}

}  // namespace

void RegisterClusterCommand(CLI::App& app, CliContext& context) {
  auto args = std::make_shared<ClusterArgs>();
  CLI::App* cmd = app.add_subcommand(
      "cluster", "Form or join a cluster without training: print the view, heartbeat, log epoch changes");
  cmd->add_option("config", args->config_file, "TOML config file (default: the built-in config)");
  cmd->add_option("--set", args->sets, "Override one setting, e.g. --set cluster.min_nodes=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--hold", args->hold_s, "Leave cleanly and exit 0 after this many seconds (default: on SIGTERM)")
      ->type_name("SECONDS")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--boundary-every", args->boundary_every_s,
                  "Seconds between epoch boundaries, where waiting joiners are admitted (default 1)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--fabric", args->fabric,
                "Open a libfabric endpoint (fabric.provider) and publish its address instead of a placeholder");
  cmd->callback([args, &context] { context.exit_code = RunCluster(*args); });
}

void RegisterLaunchCommand(CLI::App& app, CliContext& context) {
  struct LaunchArgs {
    int num_nodes = 0;
    std::string command = "node";
    std::vector<std::string> sets;
    std::vector<std::string> node_sets;
    std::vector<std::string> join_after;
    std::string config_file;
    std::vector<std::string> extra;
  };
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run N local nodes as one cluster; their output is prefixed with [node<i>]");
  cmd->add_option("-n,--nodes", args->num_nodes, "Number of node processes")->required()->check(
      CLI::Range(1, 1024));
  cmd->add_option("--command", args->command, "Subcommand every node runs: node (default) or cluster")
      ->check(CLI::IsMember({"node", "cluster"}));
  cmd->add_option("--set", args->sets, "Override one setting on every node (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--node-set", args->node_sets,
                  "Override one setting on one node, after --set (repeatable): two hosts' worth of nodes, "
                  "a straggler, another batch size")
      ->type_name("NODE:KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--join-after", args->join_after,
                  "Start node NODE (1..N-1) SECONDS after the others, and not before they formed the cluster; it "
                  "joins the running cluster, which the on-time nodes form (cluster.min_nodes = N minus the late "
                  "nodes) (repeatable)")
      ->type_name("NODE:SECONDS")
      ->allow_extra_args(false);
  cmd->add_option("config", args->config_file, "TOML config file given to every node");
  cmd->add_option("args", args->extra, "After --: extra arguments given to every node");
  cmd->footer(
      "Examples:\n"
      "  chorus launch -n 4 --command cluster configs/x.toml -- --hold 5\n"
      "  chorus launch -n 4 --join-after 3:5 configs/allreduce-ring.toml   # node3 joins the training after 5 s");
  cmd->callback([args, &context] {
    LaunchOptions options;
    options.num_nodes = args->num_nodes;
    options.command = args->command;
    options.overrides = args->sets;
    for (const std::string& text : args->node_sets) {
      Result<std::pair<int, std::string>> node_set = ParseNodeSet(text, args->num_nodes);
      if (!node_set) {
        context.exit_code = CommandError("launch", node_set.error().message(), kExitUsage);
        return;
      }
      options.node_overrides.push_back(std::move(*node_set));
    }
    for (const std::string& text : args->join_after) {
      Result<std::pair<int, double>> late = ParseJoinAfter(text, args->num_nodes);
      const bool twice = late && std::any_of(options.join_after.begin(), options.join_after.end(),
                                             [&](const auto& other) { return other.first == late->first; });
      if (!late || twice) {
        const std::string message =
            late ? "--join-after '" + text + "': node" + std::to_string(late->first) + " is already late"
                 : late.error().message();
        context.exit_code = CommandError("launch", message, kExitUsage);
        return;
      }
      options.join_after.push_back(*late);
    }
    options.config_path = args->config_file;
    options.extra_args = args->extra;
    // Without CONFIG, the first argument after "--" lands in the config slot.
    if (!options.config_path.empty() && options.config_path[0] == '-') {
      options.extra_args.insert(options.extra_args.begin(), options.config_path);
      options.config_path.clear();
    }
    if (Status checked = CheckEveryNodeConfig(options); !checked.ok()) {
      context.exit_code = CommandError("launch", checked.message(), kExitUsage);
      return;
    }
    LaunchResult result;
    Status status = Launch(options, &result);
    if (!status.ok()) {  // the launcher's messages start with "launch: " already
      std::fprintf(stderr, "chorus %s\n", status.message().c_str());
      context.exit_code = kExitFailure;
      return;
    }
    PrintLaunchEnd(options, result);
    context.exit_code = kExitOk;
  });
}

}  // namespace chorus::node
