// The model's non-trained state (BatchNorm running means and variances, and
// the batch count PyTorch keeps beside them), made one value on every member
// where the exchanges make the parameters one: the end of training and the
// all-reduce re-form. Without it the exported models of a cluster would agree
// in their weights and differ in their running statistics, which each node
// updates from its own batches.
//
// Must not: touch the parameters, momentum or loss scale (the exchanges do),
// or pick tags (the callers own their ranges).
#pragma once

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "trainer/trainer.h"

namespace chorus::node {

// Collective over `world`: every member's running statistics become their
// exact mean (a ring all-reduce), and then rank 0's bytes of that mean and
// its batch count are broadcast, so that every member holds the same bytes
// whatever the all-reduce's rounding. Uses the tag ranges at `tag_base` and
// `tag_base + gossip::kTagsPerCollective`. No communication for a model
// without BatchNorm, or alone.
[[nodiscard]] Status AverageBatchNormState(const gossip::Collective& world, trainer::Trainer& trainer,
                                           gossip::Tag tag_base, Deadline deadline);

// Collective over `world`: every member takes rank 0's running statistics
// and batch count (the re-form's resynchronisation). Uses the tag range at
// `tag_base`. No communication for a model without BatchNorm, or alone.
[[nodiscard]] Status BroadcastBatchNormState(const gossip::Collective& world, trainer::Trainer& trainer,
                                             gossip::Tag tag_base, Deadline deadline);

}  // namespace chorus::node
