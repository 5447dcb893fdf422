// node/run/: one node's run: the training loop (training_loop.h), logging,
// console and progress display, stop signals.
//
// Entry point of `chorus node`: runs one training node from a resolved config.
//
// The CLI parses and validates the config, applies overrides and environment
// hints and installs logging before calling RunNode; RunNode wires everything
// else (backend, data, model, control plane, transport, trainer, metrics).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "node/config/config.h"

namespace chorus::node {

class LogSession;

struct NodeOptions {
  bool resume = false;  // continue from the latest checkpoint in runs/<run>/<node>/
  // The CLI's logging (console only). RunNode may add the node's log file
  // (OpenFile) and prefix once the node name is known, and draws the progress
  // bar on its console(). Null when the caller installed no logging.
  LogSession* log_session = nullptr;
  // Where RunNode puts the control addresses to join through when the others
  // removed this node and it rejoins (cluster.rejoin): its bootstrap list
  // and the members it knew. Null: a removed node fails as any other.
  std::vector<std::string>* rejoin_through = nullptr;
};

// What RunNode returns when the node was removed and joins again: the caller
// starts the node afresh (RejoinAsNewProcess) with `--resume` and
// *rejoin_through as its bootstrap list.
inline constexpr int kRunNodeRejoins = -1;

// Returns the process exit code: 0 when training finished, 1 on failure
// (logged); or kRunNodeRejoins.
int RunNode(const Config& config, const NodeOptions& options);

// Replaces this process with `chorus node` as it was started (from
// /proc/self/cmdline) plus `--resume` and `--set cluster.bootstrap=[...]`:
// a new process under the same name and pid, which joins the running
// cluster and takes the live state. Returns only when exec fails (why).
Status RejoinAsNewProcess(const std::vector<std::string>& through);

}  // namespace chorus::node
