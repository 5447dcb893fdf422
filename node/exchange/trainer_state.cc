// See trainer_state.h.
#include "node/exchange/trainer_state.h"

#include "node/exchange/batch_norm_state.h"

namespace chorus::node {

Status BroadcastTrainerState(const gossip::Collective& world, trainer::Trainer& trainer,
                             const std::vector<std::span<float>>& extra, gossip::Tag tag_base, Deadline deadline) {
  gossip::CollectiveOptions options;
  options.tag_base = tag_base;
  options.deadline = deadline;
  const auto broadcast = [&](std::span<std::byte> bytes) {
    Status s = world.Broadcast(bytes, 0, options);
    options.tag_base += gossip::kTagsPerCollective;
    return s;
  };
  CHORUS_RETURN_IF_ERROR(broadcast(std::as_writable_bytes(trainer.MasterWeights())));
  CHORUS_RETURN_IF_ERROR(broadcast(std::as_writable_bytes(trainer.Momentum())));
  trainer::LossScalerState scaler = trainer.loss_scaler().state();
  CHORUS_RETURN_IF_ERROR(broadcast(std::as_writable_bytes(std::span(&scaler, 1))));
  CHORUS_RETURN_IF_ERROR(trainer.loss_scaler().Restore(scaler));
  for (std::span<float> state : extra) CHORUS_RETURN_IF_ERROR(broadcast(std::as_writable_bytes(state)));
  trainer.RefreshWorkingCopy();
  return BroadcastBatchNormState(world, trainer, options.tag_base, deadline);
}

}  // namespace chorus::node
