// ChooseAllreduceAlgorithm: what AllreduceAlgorithm::kAuto runs, from the buffer
// size, the world size and the number of hosts, by the crossover table in
// AllreduceCrossovers (collective_options.h, with the measurements behind them).
//
// Must not: communicate or measure anything: a pure function, so that every rank
// picks the same algorithm from the same inputs.
#pragma once

#include <cstddef>
#include <span>

#include "common/status.h"
#include "gossip/collective_options.h"

namespace chorus::gossip {

// Never returns kAuto. `host_memory`: the ranks of each host share a
// HostSegment (Collective::Create with shared memory). The rules, in order:
//  0. host_memory, world_size > 1 and one host: kSharedMemory.
//  1. several hosts, some shared (1 < num_hosts < world_size), and
//     bytes >= hierarchical_min_bytes: kHierarchical.
//  2. bytes <= recursive_doubling_max_bytes: kRecursiveDoubling (latency-bound:
//     the fewest message rounds).
//  3. bytes <= tree_max_bytes: kTree (still latency-bound; 0 by default).
//  4. halving_doubling_min_bytes <= bytes <= halving_doubling_max_bytes: kHalvingDoubling.
//  5. bytes >= large_tree_min_bytes: kTree (never by default; net's large buffers).
//  6. otherwise kRing (bandwidth-bound).
// The world size does not enter beyond rule 1: at 2 ranks halving-doubling and
// the ring move the same halves, and halving-doubling was the faster at 1 MiB.
AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers,
                                            bool host_memory = false);

// One measured call: `chorus bench allreduce`'s median time of `algorithm` at
// `bytes` over `world_size` ranks of one host.
struct AllreduceTiming {
  size_t bytes = 0;
  int world_size = 0;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  double time_us = 0;
};

struct CrossoverFit {
  AllreduceCrossovers crossovers;
  // Over the measured (bytes, world size) cells: the mean of log(time of what
  // auto picks / the fastest measured time), as a factor (1.0: auto picks the
  // fastest everywhere), for the fit and for `base`.
  double slowdown = 1.0;
  double base_slowdown = 1.0;
};

// The thresholds of rules 2-6 that make ChooseAllreduceAlgorithm (one host, no
// shared memory) pick the fastest measured algorithm, or as close as its rule
// order allows: an exhaustive search over thresholds at the measured sizes
// ("max" bounds inclusive, 0 or SIZE_MAX for never), keeping `base` where it
// does as well (and its hierarchical_min_bytes, which one host cannot measure).
// A lower bound that an earlier rule shadows is raised to where that rule ends.
// Errors: no cell with a time for recursive doubling, the tree,
// halving-doubling and the ring (every rule's choice must be measured);
// a time that is not positive and finite.
[[nodiscard]] Result<CrossoverFit> FitAllreduceCrossovers(std::span<const AllreduceTiming> timings,
                                                          const AllreduceCrossovers& base);

}  // namespace chorus::gossip
