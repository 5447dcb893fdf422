// ChooseAllreduceAlgorithm: what AllreduceAlgorithm::kAuto runs, from the buffer
// size, the world size and the number of hosts, by the crossover table in
// AllreduceCrossovers (collective_options.h, with the measurements behind them).
//
// Must not: communicate or measure anything: a pure function, so that every rank
// picks the same algorithm from the same inputs.
#pragma once

#include <cstddef>

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

}  // namespace chorus::gossip
