// chorus: the command-line entry point. Wires subcommands to node/ code.
#include <unistd.h>

#include <cstdlib>

#include "node/cli/cli.h"

int main(int argc, char** argv) {
  // Three settings libraries read when they are loaded, before main(), so
  // they are set here and the process re-executes once; a user's own setting
  // is kept.
  // - OpenMP threads that spin between parallel regions starve the other
  //   processes and threads of an oversubscribed machine (8 nodes on 2
  //   cores, plus fabric progress threads): measured 13x slower mlp steps
  //   under load. libgomp reads OMP_WAIT_POLICY.
  // - libinfinipath (loaded with libfabric's psm2 provider) takes over
  //   SIGSEGV, SIGBUS, SIGILL and SIGABRT unless IPATH_NO_BACKTRACE is set:
  //   it writes a backtrace file into the working directory and exits with
  //   status 1, so a crash would look like an orderly failure to whoever
  //   supervises the node, and no core dump is left.
  // - glibc's malloc asks for transparent huge pages for the memory it maps
  //   (glibc.malloc.hugetlb=1, read at start-up; ignored by a glibc before
  //   2.35 and where THP is off): a node touches hundreds of megabytes of
  //   fresh buffers (data set, fabric pools, checkpoints), and 4 KiB at a
  //   time each first touch is a page fault, dear in a virtual machine.
  const bool omp = std::getenv("OMP_WAIT_POLICY") != nullptr;
  const bool ipath = std::getenv("IPATH_NO_BACKTRACE") != nullptr;
  const bool tunables = std::getenv("GLIBC_TUNABLES") != nullptr;
  if (!omp || !ipath || !tunables) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("IPATH_NO_BACKTRACE", "1", 0);
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 0);
    execv("/proc/self/exe", argv);  // only returns on failure: carry on as we are
  }
  return chorus::node::RunCli(argc, argv);
}
