// TransportKnobs (see transport_knobs.h).
#include "node/bench/transport_knobs.h"

#include <chrono>

#include "gossip/transport/fabric/fabric_transport.h"
#include "gossip/transport/seal/data_seal.h"

namespace chorus::node {

void TransportKnobs::ApplyTo(gossip::FabricOptions& options) const {
  if (wait_spin_us >= 0) options.wait_spin = std::chrono::microseconds(wait_spin_us);
  if (wait_spin_per_mib_us >= 0) options.wait_spin_per_mib = std::chrono::microseconds(wait_spin_per_mib_us);
  if (progress_max_sleep_us >= 0) options.progress_max_sleep = std::chrono::microseconds(progress_max_sleep_us);
  options.authenticate = seal != "off";
  options.encrypt = seal == "encrypt";
}

Status TransportKnobs::SealEpoch(gossip::Transport& transport) const {
  if (seal == "off") return Status::Ok();
  return transport.SetEpochKey(0, gossip::PublicTestKey("chorus bench"));
}

}  // namespace chorus::node
