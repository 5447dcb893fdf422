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
// How many nodes' batches LARS's trust ratio sees the gradient norm of
// (trainer::TrainerOptions::lars_norm_nodes; 0: the global batch; 1: the
// node's own), from train.lars_norm and lars_norm_nodes on a CPU node with
// LARS that gossips every step (the graph over `nodes` for mixed); 1 for
// every other node.
int LarsNormNodes(const Config& config, int nodes);
// train.lars_norm where it applies (a CPU node with LARS that gossips every
// step); kLocal for every other node.
LarsNorm EffectiveLarsNorm(const Config& config);

}  // namespace chorus::node
