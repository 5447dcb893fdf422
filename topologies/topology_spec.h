// TopologySpec and MakeTopology: the config-facing way to build a Graph.
//
// node/ parses the [topology] table of the config into a TopologySpec and calls
// MakeTopology(spec, n) once membership fixes n (and again when it changes).
// Only the fields the kind uses are read: dims for "torus", degree and seed for
// "random-regular". Pure and std only: no config parsing, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topologies/graph.h"

namespace chorus::topologies {

struct TopologySpec {
  // One of TopologyKinds(): "ring", "bidirectional-ring", "torus", "hypercube",
  // "exponential", "one-peer-exponential", "random-regular", "complete".
  std::string kind = "ring";
  // "torus" only: sizes of the dimensions, product must equal n (e.g. {2, 4}).
  std::vector<int> dims;
  // "random-regular" only: the degree d (0 <= d < n, n*d even).
  int degree = 0;
  // "random-regular" only: every node must use the same seed to get the same graph.
  uint64_t seed = 1;
};

// The accepted kind names, in the order above.
const std::vector<std::string_view>& TopologyKinds();
bool IsKnownTopologyKind(std::string_view kind);

// Checks what can be checked before n is known: the kind name, dims >= 1 for a torus,
// degree >= 0 for random-regular. Errors name the field.
Status ValidateTopologySpec(const TopologySpec& spec);

// Builds the graph of `spec` over ranks 0..n-1; errors say why the shape does not fit n.
Result<Graph> MakeTopology(const TopologySpec& spec, int n);

}  // namespace chorus::topologies
