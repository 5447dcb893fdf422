// ChooseAllreduceAlgorithm (see allreduce_auto.h).
#include "gossip/allreduce_auto.h"

namespace chorus::gossip {

AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers, bool host_memory) {
  if (host_memory && num_hosts == 1 && world_size > 1) return AllreduceAlgorithm::kSharedMemory;
  if (num_hosts > 1 && num_hosts < world_size && bytes >= crossovers.hierarchical_min_bytes) {
    return AllreduceAlgorithm::kHierarchical;
  }
  if (bytes <= crossovers.recursive_doubling_max_bytes) {
    return AllreduceAlgorithm::kRecursiveDoubling;
  }
  if (bytes <= crossovers.tree_max_bytes) return AllreduceAlgorithm::kTree;
  if (bytes >= crossovers.halving_doubling_min_bytes && bytes <= crossovers.halving_doubling_max_bytes) {
    return AllreduceAlgorithm::kHalvingDoubling;
  }
  if (bytes >= crossovers.large_tree_min_bytes) return AllreduceAlgorithm::kTree;
  return AllreduceAlgorithm::kRing;
}

}  // namespace chorus::gossip
