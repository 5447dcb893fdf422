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

// Never returns kAuto. The rules, in order:
//  1. several hosts, some shared (1 < num_hosts < world_size), and
//     bytes >= hierarchical_min_bytes: kHierarchical.
//  2. bytes <= recursive_doubling_max_bytes: kRecursiveDoubling (latency-bound:
//     the fewest message rounds).
//  3. world_size <= 2: kRing (one exchange of halves each way).
//  4. bytes <= tree_max_bytes: kTree (still latency-bound; 0 by default).
//  5. halving_doubling_min_bytes <= bytes <= halving_doubling_max_bytes: kHalvingDoubling.
//  6. otherwise kRing (bandwidth-bound).
AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers);

}  // namespace chorus::gossip
