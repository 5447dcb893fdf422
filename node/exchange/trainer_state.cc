// See trainer_state.h.
#include "node/exchange/trainer_state.h"

#include <algorithm>

#include "node/exchange/batch_norm_state.h"
#include "node/exchange/trainer_state_wire.h"

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
  std::array<std::byte, kLossScalerStateBytes> scaler = EncodeLossScalerState(trainer.loss_scaler().state());
  CHORUS_RETURN_IF_ERROR(broadcast(scaler));
  CHORUS_ASSIGN_OR_RETURN(const trainer::LossScalerState state, DecodeLossScalerState(scaler));
  CHORUS_RETURN_IF_ERROR(trainer.loss_scaler().Restore(state));
  for (std::span<float> state : extra) CHORUS_RETURN_IF_ERROR(broadcast(std::as_writable_bytes(state)));
  trainer.RefreshWorkingCopy();
  return BroadcastBatchNormState(world, trainer, options.tag_base, deadline);
}

void ApplySampleWeights(Exchange::Weighting weighting, trainer::Trainer& trainer, std::span<const int> shares,
                        int own) {
  const double weight = SampleWeightOf(shares, own);
  switch (weighting) {
    case Exchange::Weighting::kGradient: trainer.SetSampleWeights(weight, 1.0); break;
    case Exchange::Weighting::kUpdate: trainer.SetSampleWeights(1.0, weight); break;
    case Exchange::Weighting::kNone: trainer.SetSampleWeights(1.0, 1.0); break;
  }
}

}  // namespace chorus::node
