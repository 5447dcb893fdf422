// ChooseAllreduceAlgorithm: what AllreduceAlgorithm::kAuto runs, from the buffer
// size, the world size and the number of hosts, by the crossover table in
// AllreduceCrossovers (collective_options.h; placeholder values until measured).
//
// Must not: communicate or measure anything: a pure function, so that every rank
// picks the same algorithm from the same inputs.
#pragma once

#include <cstddef>

#include "gossip/collective_options.h"

namespace chorus::gossip {

// Never returns kAuto. The rules, in order:
//  1. world_size <= 2: kRing (one exchange of halves each way; nothing beats it).
//  2. several hosts, some shared (1 < num_hosts < world_size), and
//     bytes >= hierarchical_min_bytes: kHierarchical.
//  3. bytes <= tree_max_bytes: kTree (latency-bound).
//  4. halving_doubling_min_bytes <= bytes <= halving_doubling_max_bytes: kHalvingDoubling.
//  5. otherwise kRing (bandwidth-bound).
AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers);

}  // namespace chorus::gossip
