// node/launch/: `chorus launch`: N local node processes, their output
// prefixed, signals forwarded.
//
// `chorus launch -n N CONFIG`: N local node processes as one cluster.
//
// Forks and execs N copies of this binary (`chorus <command> CONFIG --set ...`)
// with per-node settings: node0 listens on a free port of 127.0.0.1 (a socket
// launch binds and hands over, kListenFdEnv) and every node bootstraps from
// it, node i is named "node<i>" with rank hint i, and cluster.min_nodes is N
// minus the late nodes.
// Late nodes (`--join-after NODE:SECONDS`, never node0) start that long after
// the first fork, and not before every on-time node is in epoch 0, so that
// they join the running cluster (the on-time nodes form it, however slowly
// they start on a loaded host, rather than with a late node); a
// late node whose time comes after every on-time node exited, or after a
// signal, is never started, and counts as failed in the first case.
// Each child's stdout and stderr lines are copied to ours with a "[node<i>] "
// prefix. SIGINT and SIGTERM are forwarded to the
// children (a second one sends SIGKILL). Launch waits for every child and fails
// naming each node that exited non-zero or died by a signal.
//
// Must not: parse the config (the children do), or kill children on its own
// because one failed (the cluster is meant to survive that).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "node/control/listen_socket.h"  // ListenOnFreePort, kListenFdEnv

namespace chorus::node {

// A running launch's nodes, for a supervisor that acts on them while they run
// (`chorus chaos`: kills, freezes and restarts). Only valid inside
// LaunchOptions::on_tick.
class LaunchControl {
 public:
  virtual ~LaunchControl() = default;
  virtual int num_nodes() const = 0;
  // Started and not yet reaped (a stopped process is running).
  virtual bool Running(int node) const = 0;
  virtual pid_t Pid(int node) const = 0;
  // Sends `sig` to the node's process; false when it is not running.
  virtual bool Signal(int node, int sig) = 0;
  // Starts a node that has ended again under its name, joining the running
  // cluster: bootstrap from `bootstrap` (host:port of live members), listening
  // on a free port, then `extra_sets` ("key=value"). Its lines keep the prefix.
  virtual Status Restart(int node, const std::vector<std::string>& bootstrap,
                         const std::vector<std::string>& extra_sets) = 0;
  // `sig` to every running node.
  virtual void SignalAll(int sig) = 0;
  // The last wait status of the node's process (valid once it ended).
  virtual int WaitStatus(int node) const = 0;
  // A SIGINT or SIGTERM reached the launch and went to the nodes: nothing
  // should start them again.
  virtual bool Interrupted() const = 0;
};

struct LaunchOptions {
  int num_nodes = 1;
  std::string config_path;              // passed to every child ("" = none)
  std::string command = "node";         // the subcommand each child runs: "node" or "cluster"
  std::vector<std::string> overrides;   // "key=value", given as --set to every child after ours
  std::vector<std::string> extra_args;  // appended to every child's command line (after "--")
  std::string executable = "/proc/self/exe";
  std::string host = "127.0.0.1";       // every node listens here
  // Per node (index i), when not empty: the host node i listens on (overrides
  // `host`; node0's is the bootstrap address), and an argv prefix that node i's
  // command runs under (e.g. {"ip", "netns", "exec", "ns0"}: link emulation).
  std::vector<std::string> node_hosts;
  std::vector<std::vector<std::string>> node_wrappers;
  // Extra "key=value" settings for single nodes, after `overrides` (e.g. a
  // straggler: {3, "train.slowdown=2"}).
  std::vector<std::pair<int, std::string>> node_overrides;
  // Late nodes: {node, seconds after the first fork}, node in [1, num_nodes),
  // each at most once, seconds >= 0 (e.g. {3, 5.0}: node3 joins after 5 s).
  std::vector<std::pair<int, double>> join_after;
  // Where the children's prefixed lines go: "" = our stdout / stderr; else this
  // file (appended), and launch's own messages too.
  std::string output_file;
  // Called about every 100 ms while nodes run (and once more when all ended).
  std::function<void(LaunchControl&)> on_tick;
  // Every line a node writes (without the prefix), as it is copied.
  std::function<void(int node, std::string_view line)> on_line;
};

struct LaunchResult {
  // Seconds from the first fork until every on-time node (not in join_after)
  // logged "epoch 0: members"; negative when that never happened.
  double formed_after_s = -1;
  std::vector<int> exit_codes;  // per node; 128+signal for a signal; -1: never started (late)
  bool interrupted = false;     // SIGINT / SIGTERM reached launch (and was forwarded)
};

// Runs the nodes to completion. Ok when all exit 0; otherwise Aborted naming the
// failed nodes ("node2 exited with status 3; node4 was killed by signal 9 (Killed)").
[[nodiscard]] Status Launch(const LaunchOptions& options, LaunchResult* result);

// One node's setting from `chorus launch --node-set`: "NODE:KEY=VALUE" (e.g.
// "2:cluster.host_group=b") for node index NODE in [0, num_nodes). The key and
// value are checked by the node, like --set's.
[[nodiscard]] Result<std::pair<int, std::string>> ParseNodeSet(std::string_view text, int num_nodes);

// A late node from `chorus launch --join-after`: "NODE:SECONDS" (e.g. "3:5")
// for node index NODE in [1, num_nodes) (node0 holds the bootstrap port) and
// SECONDS >= 0.
[[nodiscard]] Result<std::pair<int, double>> ParseJoinAfter(std::string_view text, int num_nodes);

}  // namespace chorus::node
