// ChooseAllreduceAlgorithm: what AllreduceAlgorithm::kAuto runs, from the buffer
// size, the world size and the number of hosts, by the crossover table in
// AllreduceCrossovers (collective_options.h). The measurements behind the
// crossovers: docs/performance.md ("Crossovers and segment sizes").
//
// Must not: communicate or measure anything: a pure function, so that every rank
// picks the same algorithm from the same inputs.
#pragma once

#include <cstddef>
#include <span>

#include "common/status.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

// Never returns kAuto. `host_memory`: the ranks of each host share a
// HostSegment (Collective::Create with shared memory). `host_cores`: the cores
// of the host when all ranks are on one (num_hosts == 1); 0: unknown. The
// rules, in order:
//  0. host_memory, world_size > 1 and one host: kSharedMemory.
//  1. several hosts, some shared (1 < num_hosts < world_size), and
//     bytes >= hierarchical_min_bytes: kHierarchical.
//  2. one host with more ranks than cores, bytes <= small_tree_max_bytes, and
//     the tree sends fewer messages in all than recursive doubling (4 ranks or
//     more): kTree (one binary tree at such sizes; see small_tree_max_bytes).
//  3. bytes <= recursive_doubling_max_bytes: kRecursiveDoubling (latency-bound:
//     the fewest message rounds).
//  4. bytes <= tree_max_bytes: kTree (still latency-bound; 0 by default).
//  5. halving_doubling_min_bytes <= bytes <= halving_doubling_max_bytes: kHalvingDoubling.
//  6. bytes >= large_tree_min_bytes: kTree (never by default; net's large buffers).
//  7. otherwise kRing (bandwidth-bound).
// The world size does not enter beyond rules 1 and 2: at 2 ranks
// halving-doubling and the ring move the same halves, and halving-doubling was
// the faster at 1 MiB.
AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers,
                                            bool host_memory = false, int host_cores = 0);

// Every rank on one host, and more ranks than the host's cores (0: unknown,
// never oversubscribed). There every message's kernel work competes for the
// same cores, so the number of messages, more than of rounds, sets the time of
// a call: rule 2 above and DefaultSegmentBytes act on it.
bool Oversubscribed(int world_size, int num_hosts, int host_cores);

// Messages that all ranks send in all, per all-reduce of one segment: the tree
// (up and down one binary tree, 2 (n-1)), and recursive doubling (p log2 p
// among the largest power of two p <= n, plus 2 (n - p) to fold the rest in
// and out): 6 against 8 at 4 ranks, equal at 2 and 3.
int TreeAllreduceMessages(int world_size);
int RecursiveDoublingMessages(int world_size);

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

// The thresholds of rules 2-7 that make ChooseAllreduceAlgorithm (one host of
// `host_cores` cores, no shared memory) pick the fastest measured algorithm, or
// as close as its rule order allows (small_tree_max_bytes only where a measured
// world size makes rule 2 apply, else base's): an exhaustive search over
// thresholds at the measured sizes ("max" bounds inclusive, 0 or SIZE_MAX for never), keeping `base` where it
// does as well (and its hierarchical_min_bytes, which one host cannot measure).
// A lower bound that an earlier rule shadows is raised to where that rule ends
// where that changes no pick at a measured size.
// Errors: no cell with a time for recursive doubling, the tree,
// halving-doubling and the ring (every rule's choice must be measured);
// a time that is not positive and finite.
[[nodiscard]] Result<CrossoverFit> FitAllreduceCrossovers(std::span<const AllreduceTiming> timings,
                                                          const AllreduceCrossovers& base,
                                                          int host_cores = 0);

}  // namespace chorus::gossip
