// The trainer settings of a node's config: the one translation from
// node::Config (TOML) to trainer::TrainerOptions, used by real nodes
// (run_node.cc) and virtual ones (simulate_node.cc) alike.
#pragma once

#include <cstdint>

#include "node/config/config.h"
#include "trainer/trainer.h"

namespace chorus::node {

// `global_batch`: the sum of every member's batch (linear LR scaling);
// `steps_per_epoch`: this node's steps per epoch (LR schedule).
trainer::TrainerOptions MakeTrainerOptions(const Config& config, int global_batch, int64_t steps_per_epoch);
// Whether LARS's trust ratio sees the global batch's estimated gradient norm
// (train.lars_norm, auto resolved by the exchange and the device).
bool LarsGlobalBatchNorm(const Config& config);

}  // namespace chorus::node
