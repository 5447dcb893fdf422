// Names of the all-reduce algorithms (see collective_options.h).
#include "gossip/collectives/collective_options.h"

#include <string>

namespace chorus::gossip {

Result<AllreduceAlgorithm> ParseAllreduceAlgorithm(std::string_view text) {
  if (auto algorithm = FromName(kAllreduceAlgorithmNames, text)) return *algorithm;
  return Err(InvalidArgument("unknown all-reduce algorithm '" + std::string(text) + "' (expected " +
                             JoinNames(NamesOf(kAllreduceAlgorithmNames), ", ") + ")"));
}

AllreduceCrossovers CrossoversForProvider(FabricProvider provider) {
  AllreduceCrossovers x;
  if (provider == FabricProvider::kNet) {
    x.small_tree_max_bytes = 64 * 1024;
    x.large_tree_min_bytes = x.halving_doubling_max_bytes + 1;
  }
  if (provider == FabricProvider::kTcpRxm) {
    x.small_tree_max_bytes = 4 * 1024 * 1024;
    x.recursive_doubling_max_bytes = 256 * 1024;
    x.halving_doubling_min_bytes = x.recursive_doubling_max_bytes + 1;
  }
  return x;
}

size_t DefaultSegmentBytes(int world_size, bool oversubscribed, AllreduceAlgorithm algorithm, size_t buffer_bytes,
                           size_t eager_limit) {
  constexpr size_t kPage = 4096;
  const bool large = world_size == 2 || (oversubscribed && algorithm != AllreduceAlgorithm::kTree);
  const size_t segment = large ? 512 * 1024 : 256 * 1024;
  if (world_size == 2 && buffer_bytes >= kRendezvousSegmentsFrom && eager_limit >= segment &&
      eager_limit < segment + kRendezvousSlack) {
    return (eager_limit / kPage + 1) * kPage;
  }
  return segment;
}

}  // namespace chorus::gossip
