// node/bench/: the `chorus bench` subcommands: all-reduce and point-to-point
// between local processes over the real libfabric transport.
//
// `chorus bench allreduce`: nccl-tests-style table of Chorus's all-reduce
// algorithms (gossip::Collective) over the real libfabric transport, between
// N fork()ed processes on this host.
//
// Definitions (as nccl-tests, and as the Open MPI peer baseline's
// mpi_allreduce.c: docs/performance.md, "bench/compare_peers.sh"):
//   time  = per-call wall time in microseconds: for every timed call the
//           slowest rank's time (a synchronous step waits for it), and the
//           table shows the median over calls of those maxima,
//   p99   = the 99th percentile of the same maxima (one call in a hundred is
//           slower: on an oversubscribed host, scheduling stalls show here),
//   algbw = size / time (GB/s, 1 GB = 1e9 bytes),
//   busbw = algbw * 2 (n - 1) / n.
// Calls run with identify_missing_peers = false: the numbers are the algorithm
// alone, without the node's per-call "hello" messages.
//
// Must not: run inside the test suite (it takes seconds to minutes); touch other
// hosts (tcp binds to 127.0.0.1); leave a child process or a /dev/shm region
// behind, even when a rank fails.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gossip/collectives/collective_options.h"
#include "node/bench/transport_knobs.h"
#include "node/config/config.h"

namespace chorus::node {

struct BenchAllreduceOptions {
  // Providers to measure, each with its own set of processes.
  std::vector<gossip::FabricProvider> providers = {gossip::FabricProvider::kShm, gossip::FabricProvider::kNet,
                                                   gossip::FabricProvider::kTcpRxm};
  // World sizes (number of processes), each >= 2.
  std::vector<int> ranks = {2, 4};
  std::vector<gossip::AllreduceAlgorithm> algorithms = {
      gossip::AllreduceAlgorithm::kRing, gossip::AllreduceAlgorithm::kTree,
      gossip::AllreduceAlgorithm::kHalvingDoubling, gossip::AllreduceAlgorithm::kRecursiveDoubling};
  // Buffer sizes in bytes, measured for float32 and float16.
  std::vector<size_t> sizes;
  // Timed time per (algorithm, type, size) that the iteration count aims at.
  double seconds_per_size = 1.0;
  // Rounds over every row. Above 1 the rows run size by size with the
  // algorithms alternated inside each size, every round again, and each
  // provider ends with the median over rounds per (algorithm, size) and what
  // `auto` ran against the fastest: on a host whose speed drifts, neighbours
  // in time are compared, not rows minutes apart. The fit takes the medians.
  int rounds = 1;
  // Bounds on the timed iterations per size.
  int min_iterations = 5;
  int max_iterations = 2000;
  // Untimed all-reduces (of the first row) before the first row: freshly
  // started processes on an oversubscribed host ran their first row's calls
  // up to twice as slow for about half a second.
  double warmup_seconds = 1.0;
  // FabricOptions::busy_poll in microseconds; < 0 picks gossip::BusyPollFor(provider, ranks).
  int busy_poll_us = -1;
  // FabricOptions::rxm_eager_limit over tcp;ofi_rxm (0: rxm's own protocols).
  size_t rxm_eager_limit = gossip::kDefaultRxmEagerLimit;
  // AllreduceOptions::segment_bytes of every call (0: DefaultSegmentBytes).
  size_t segment_bytes = 0;
  TransportKnobs knobs;
  // What `auto` picks by, as a node with these [exchange.crossovers] would on
  // each provider (-1 sizes: the provider's default).
  CrossoversConfig crossovers;
  // After each provider's tables, fit [exchange.crossovers] to its float32
  // rows (gossip::FitAllreduceCrossovers) and print them as TOML. Needs the
  // ring, the tree, halving-doubling and recursive doubling among `algorithms`.
  bool fit_crossovers = false;
};

// The [exchange.crossovers] table of a fit, in a node's KiB (upper bounds
// rounded up, lower bounds down; "never" as 0 for upper bounds and INT32_MAX
// KiB for lower ones), hierarchical_min_kib left out (one host cannot measure it).
std::string CrossoversToml(const gossip::AllreduceCrossovers& crossovers);

// Sizes from `min_size` to `max_size` growing x4 (max_size always included).
std::vector<size_t> BenchAllreduceSizes(size_t min_size, size_t max_size);

// Runs the benchmark and prints one table per (provider, world size) to stdout.
// Returns a process exit code: 0 success, 1 a run failed or a check failed.
int RunBenchAllreduce(const BenchAllreduceOptions& options);

}  // namespace chorus::node
