// node/run/: one node's run: the training loop (training_loop.h), logging,
// console and progress display, stop signals.
//
// Entry point of `chorus node`: runs one training node from a resolved config.
//
// The CLI parses and validates the config, applies overrides and environment
// hints and installs logging before calling RunNode; RunNode wires everything
// else (backend, data, model, control plane, transport, trainer, metrics).
#pragma once

#include "node/config/config.h"

namespace chorus::node {

class LogSession;

struct NodeOptions {
  bool resume = false;  // continue from the latest checkpoint in runs/<run>/<node>/
  // The CLI's logging (console only). RunNode may add the node's log file
  // (OpenFile) and prefix once the node name is known, and draws the progress
  // bar on its console(). Null when the caller installed no logging.
  LogSession* log_session = nullptr;
};

// Returns the process exit code: 0 when training finished, 1 on failure (logged).
int RunNode(const Config& config, const NodeOptions& options);

}  // namespace chorus::node
