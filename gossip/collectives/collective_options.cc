// Names of the all-reduce algorithms (see collective_options.h).
#include "gossip/collectives/collective_options.h"

#include <string>

namespace chorus::gossip {

std::string_view AllreduceAlgorithmName(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kAuto: return "auto";
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kTree: return "tree";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving_doubling";
    case AllreduceAlgorithm::kHierarchical: return "hierarchical";
    case AllreduceAlgorithm::kRecursiveDoubling: return "recursive_doubling";
    case AllreduceAlgorithm::kSharedMemory: return "shared_memory";
  }
  return "unknown";
}

Result<AllreduceAlgorithm> ParseAllreduceAlgorithm(std::string_view text) {
  for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kSharedMemory}) {
    if (text == AllreduceAlgorithmName(a)) return a;
  }
  return Err(InvalidArgument("unknown all-reduce algorithm '" + std::string(text) +
                             "' (expected auto, ring, tree, halving_doubling, hierarchical, "
                             "recursive_doubling or shared_memory)"));
}

AllreduceCrossovers CrossoversForProvider(std::string_view provider) {
  AllreduceCrossovers x;
  if (provider == "net") {
    x.small_tree_max_bytes = 64 * 1024;
    x.large_tree_min_bytes = x.halving_doubling_max_bytes + 1;
  }
  if (provider == "tcp;ofi_rxm") {
    x.small_tree_max_bytes = 16 * 1024;
    x.recursive_doubling_max_bytes = 256 * 1024;
    x.halving_doubling_min_bytes = x.recursive_doubling_max_bytes + 1;
  }
  return x;
}

size_t DefaultSegmentBytes(int world_size, bool oversubscribed, AllreduceAlgorithm algorithm) {
  const bool large = world_size == 2 || (oversubscribed && algorithm != AllreduceAlgorithm::kTree);
  return large ? 512 * 1024 : 256 * 1024;
}

}  // namespace chorus::gossip
