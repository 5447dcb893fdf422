// `chorus bench p2p`: point-to-point ping-pong over the fabric transport, two
// processes on this host, with fi_pingpong's definitions so the numbers compare:
//   latency   = round-trip time / 2 (we print the median and the mean; fi_pingpong's
//               usec/xfer is the mean),
//   bandwidth = 2 x size x iterations / elapsed (fi_pingpong's MB/sec, here in GB/s,
//               1 GB = 1e9 bytes).
// The peer is a fork()ed child; addresses go over a socketpair.
//
// Must not: run inside the test suite (it takes seconds); touch other hosts (the
// tcp provider binds to 127.0.0.1).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "node/bench/transport_knobs.h"

#include "gossip/transport/provider.h"

namespace chorus::node {

struct BenchP2pOptions {
  // Providers to measure, each in its own pair of processes.
  std::vector<gossip::FabricProvider> providers = {gossip::FabricProvider::kTcpRxm, gossip::FabricProvider::kNet,
                                                   gossip::FabricProvider::kShm};
  size_t min_size = size_t{4} << 10;   // bytes, first size
  size_t max_size = size_t{64} << 20;  // bytes, last size (sizes grow x4)
  // Timed round trips per size; 0 picks min(1000, max(10, 1 GiB / size)).
  int iterations = 0;
  // Untimed round trips before the timed ones; -1 picks iterations / 10 (at least 2).
  int warmup = -1;
  // < 0 picks gossip::BusyPollFor(provider, 2).
  int busy_poll_us = -1;
  TransportKnobs knobs;
};

// Runs the benchmark and prints one table row per (provider, size) to stdout.
// Returns a process exit code: 0 success, 1 a provider failed (logged).
int RunBenchP2p(const BenchP2pOptions& options);

}  // namespace chorus::node
