// chorus: the command-line entry point. Wires subcommands to node/ code.
#include <unistd.h>

#include <cstdlib>

#include "node/cli/cli.h"

int main(int argc, char** argv) {
  // OpenMP threads that spin between parallel regions starve the other
  // processes and threads of an oversubscribed machine (8 nodes on 2 cores,
  // plus fabric progress threads): measured 13x slower mlp steps under load.
  // libgomp reads OMP_WAIT_POLICY when it is loaded, before main(), so set it
  // and re-execute once; a user's own setting is kept.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    execv("/proc/self/exe", argv);  // only returns on failure: carry on as we are
  }
  return chorus::node::RunCli(argc, argv);
}
