// chorus: the command-line entry point. Wires subcommands to node/ code.
#include <unistd.h>

#include <cstdlib>

#include "node/cli/cli.h"

int main(int argc, char** argv) {
  // Two settings libraries read when they are loaded, before main(), so they
  // are set here and the process re-executes once; a user's own setting is
  // kept.
  // - OpenMP threads that spin between parallel regions starve the other
  //   processes and threads of an oversubscribed machine (8 nodes on 2
  //   cores, plus fabric progress threads): measured 13x slower mlp steps
  //   under load. libgomp reads OMP_WAIT_POLICY.
  // - libinfinipath (loaded with libfabric's psm2 provider) takes over
  //   SIGSEGV, SIGBUS, SIGILL and SIGABRT unless IPATH_NO_BACKTRACE is set:
  //   it writes a backtrace file into the working directory and exits with
  //   status 1, so a crash would look like an orderly failure to whoever
  //   supervises the node, and no core dump is left.
  const bool omp = std::getenv("OMP_WAIT_POLICY") != nullptr;
  const bool ipath = std::getenv("IPATH_NO_BACKTRACE") != nullptr;
  if (!omp || !ipath) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("IPATH_NO_BACKTRACE", "1", 0);
    execv("/proc/self/exe", argv);  // only returns on failure: carry on as we are
  }
  return chorus::node::RunCli(argc, argv);
}
