// What the exchange sets in a node's trainer: a re-form's resynchronisation
// (every member takes rank 0's whole trainer state, so that replicas are
// bitwise one again after a member died mid-step: a survivor may have
// applied the failed step, moving its weights, momentum and loss scale, or
// after a resume), and the sample weights of unequal batches.
//
// Must not: pick tags (the callers own their ranges) or decide when to run.
#pragma once

#include <span>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/exchange/exchange.h"
#include "trainer/trainer.h"

namespace chorus::node {

// Collective over `world`: rank 0's master weights, momentum, loss-scaler
// state, then each of `extra` (an exchange's own state, such as the outer
// parameters and velocity), then its BatchNorm statistics, broadcast in that
// order from consecutive tag ranges starting at `tag_base`. The working copy
// is refreshed from the master.
[[nodiscard]] Status BroadcastTrainerState(const gossip::Collective& world, trainer::Trainer& trainer,
                                           const std::vector<std::span<float>>& extra, gossip::Tag tag_base,
                                           Deadline deadline);

// A node whose batch is `own` of a global batch B = sum(shares) over W =
// shares.size() members weighs W * own / B, so that every sample of the
// global batch counts the same; `weighting` (Exchange::SampleWeighting)
// says whether that weight multiplies the gradients or the update.
void ApplySampleWeights(Exchange::Weighting weighting, trainer::Trainer& trainer, std::span<const int> shares,
                        int own);

}  // namespace chorus::node
