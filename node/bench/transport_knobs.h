// The fabric transport's waiting knobs as the benches take them: each < 0
// keeps FabricOptions' default. Lets one measure, on a given host, how a
// wait's spin and the progress thread's back-off move a benchmark
// (docs/libfabric.md, "Progress and waiting").
#pragma once

namespace chorus::gossip {
struct FabricOptions;
}

namespace chorus::node {

struct TransportKnobs {
  int wait_spin_us = -1;           // FabricOptions::wait_spin
  int wait_spin_per_mib_us = -1;   // FabricOptions::wait_spin_per_mib
  int progress_max_sleep_us = -1;  // FabricOptions::progress_max_sleep

  // Sets the knobs that are >= 0 in `options`.
  void ApplyTo(gossip::FabricOptions& options) const;
};

}  // namespace chorus::node
