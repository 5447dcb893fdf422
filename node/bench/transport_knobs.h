// The fabric transport's waiting knobs as the benches take them: each < 0
// keeps FabricOptions' default. Lets one measure, on a given host, how a
// wait's spin and the progress thread's back-off move a benchmark
// (docs/libfabric.md, "Progress and waiting").
#pragma once

#include <string>

#include "common/status.h"

namespace chorus::gossip {
struct FabricOptions;
class Transport;
}

namespace chorus::node {

struct TransportKnobs {
  int wait_spin_us = -1;           // FabricOptions::wait_spin
  int wait_spin_per_mib_us = -1;   // FabricOptions::wait_spin_per_mib
  int progress_max_sleep_us = -1;  // FabricOptions::progress_max_sleep
  // "off", "mac" or "encrypt": whether every message is sealed (FabricOptions::
  // authenticate, encrypt) under a key every bench process computes alike.
  std::string seal = "off";

  // Sets the knobs that are >= 0 in `options`, and the seal.
  void ApplyTo(gossip::FabricOptions& options) const;
  // Gives `transport` the bench's epoch key when sealing; call it before SetPeers.
  [[nodiscard]] Status SealEpoch(gossip::Transport& transport) const;
};

}  // namespace chorus::node
