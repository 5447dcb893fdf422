// MakeTopology: dispatch from a TopologySpec to the graph builders. See topology_spec.h.
#include "topologies/topology_spec.h"

#include <algorithm>
#include <string>
#include <vector>

#include "topologies/graph_builders.h"

namespace chorus::topologies {
namespace {

std::string KindList() {
  std::string list;
  for (std::string_view kind : TopologyKinds()) {
    if (!list.empty()) list += ", ";
    list += kind;
  }
  return list;
}

}  // namespace

const std::vector<std::string_view>& TopologyKinds() {
  static const std::vector<std::string_view> kKinds = {
      "ring",        "bidirectional-ring",   "torus",          "hypercube",
      "exponential", "one-peer-exponential", "random-regular", "complete"};
  return kKinds;
}

bool IsKnownTopologyKind(std::string_view kind) {
  const auto& kinds = TopologyKinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

Status ValidateTopologySpec(const TopologySpec& spec) {
  if (!IsKnownTopologyKind(spec.kind)) {
    return InvalidArgument("topology kind '" + spec.kind + "' is unknown; expected one of: " +
                           KindList());
  }
  if (spec.kind == "torus") {
    if (spec.dims.empty()) return InvalidArgument("topology torus: dims must list the dimension sizes");
    for (size_t k = 0; k < spec.dims.size(); ++k) {
      if (spec.dims[k] < 1) {
        return InvalidArgument("topology torus: dims[" + std::to_string(k) + "] is " +
                               std::to_string(spec.dims[k]) + "; each must be >= 1");
      }
    }
  }
  if (spec.kind == "random-regular" && spec.degree < 0) {
    return InvalidArgument("topology random-regular: degree is " + std::to_string(spec.degree) +
                           "; must be >= 0");
  }
  return Status::Ok();
}

Result<Graph> MakeTopology(const TopologySpec& spec, int n) {
  CHORUS_RETURN_IF_ERROR(ValidateTopologySpec(spec));
  const std::string& kind = spec.kind;
  if (kind == "ring") return RingGraph(n);
  if (kind == "bidirectional-ring") return BidirectionalRingGraph(n);
  if (kind == "torus") return TorusGraph(n, spec.dims);
  if (kind == "hypercube") return HypercubeGraph(n);
  if (kind == "exponential") return ExponentialGraph(n);
  if (kind == "one-peer-exponential") return OnePeerExponentialGraph(n);
  if (kind == "random-regular") return RandomRegularGraph(n, spec.degree, spec.seed);
  if (kind == "complete") return CompleteGraph(n);
  return Err(Internal("topology kind '" + kind + "' is listed in TopologyKinds() but has no builder"));
}

}  // namespace chorus::topologies
