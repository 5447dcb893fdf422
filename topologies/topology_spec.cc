// MakeTopology: dispatch from a TopologySpec to the graph builders. See topology_spec.h.
#include "topologies/topology_spec.h"

#include <string>
#include <vector>

#include "topologies/graph_builders.h"

namespace chorus::topologies {
Status ValidateTopologySpec(const TopologySpec& spec) {
  if (spec.kind == GraphKind::kTorus) {
    if (spec.dims.empty()) return InvalidArgument("topology torus: dims must list the dimension sizes");
    for (size_t k = 0; k < spec.dims.size(); ++k) {
      if (spec.dims[k] < 1) {
        return InvalidArgument("topology torus: dims[" + std::to_string(k) + "] is " +
                               std::to_string(spec.dims[k]) + "; each must be >= 1");
      }
    }
  }
  if (spec.kind == GraphKind::kRandomRegular && spec.degree < 0) {
    return InvalidArgument("topology random-regular: degree is " + std::to_string(spec.degree) +
                           "; must be >= 0");
  }
  return Status::Ok();
}

Result<Graph> MakeTopology(const TopologySpec& spec, int n) {
  CHORUS_RETURN_IF_ERROR(ValidateTopologySpec(spec));
  switch (spec.kind) {
    case GraphKind::kRing: return RingGraph(n);
    case GraphKind::kBidirectionalRing: return BidirectionalRingGraph(n);
    case GraphKind::kTorus: return TorusGraph(n, spec.dims);
    case GraphKind::kHypercube: return HypercubeGraph(n);
    case GraphKind::kExponential: return ExponentialGraph(n);
    case GraphKind::kOnePeerExponential: return OnePeerExponentialGraph(n);
    case GraphKind::kRandomRegular: return RandomRegularGraph(n, spec.degree, spec.seed);
    case GraphKind::kComplete: return CompleteGraph(n);
  }
  return Err(Internal("topology kind " + std::to_string(static_cast<int>(spec.kind)) + " has no builder"));
}

}  // namespace chorus::topologies
