// TopologySpec and MakeTopology: the config-facing way to build a Graph.
//
// node/ parses the [topology] table of the config into a TopologySpec and calls
// MakeTopology(spec, n) once membership fixes n (and again when it changes).
// Only the fields the kind uses are read: dims for kTorus, degree and seed for
// kRandomRegular. Pure and std only: no config parsing, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/status.h"
#include "topologies/graph.h"

namespace chorus::topologies {

// The graphs graph_builders.h builds.
enum class GraphKind {
  kRing,
  kBidirectionalRing,
  kTorus,
  kHypercube,
  kExponential,
  kOnePeerExponential,
  kRandomRegular,
  kComplete,
};
inline constexpr EnumName<GraphKind> kGraphKindNames[] = {
    {GraphKind::kRing, "ring"},
    {GraphKind::kBidirectionalRing, "bidirectional-ring"},
    {GraphKind::kTorus, "torus"},
    {GraphKind::kHypercube, "hypercube"},
    {GraphKind::kExponential, "exponential"},
    {GraphKind::kOnePeerExponential, "one-peer-exponential"},
    {GraphKind::kRandomRegular, "random-regular"},
    {GraphKind::kComplete, "complete"},
};
inline std::string_view GraphKindName(GraphKind kind) { return NameOf(kGraphKindNames, kind); }

struct TopologySpec {
  GraphKind kind = GraphKind::kRing;
  // kTorus only: sizes of the dimensions, product must equal n (e.g. {2, 4}).
  std::vector<int> dims;
  // kRandomRegular only: the degree d (0 <= d < n, n*d even).
  int degree = 0;
  // kRandomRegular only: every node must use the same seed to get the same graph.
  uint64_t seed = 1;
};

// Checks what can be checked before n is known: dims >= 1 for a torus, degree
// >= 0 for random-regular. Errors name the field.
Status ValidateTopologySpec(const TopologySpec& spec);

// Builds the graph of `spec` over ranks 0..n-1; errors say why the shape does not fit n.
Result<Graph> MakeTopology(const TopologySpec& spec, int n);

}  // namespace chorus::topologies
