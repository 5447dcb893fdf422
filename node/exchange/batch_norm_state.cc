// The model's non-trained state made one on every member (see batch_norm_state.h).
#include "node/exchange/batch_norm_state.h"

#include <vector>

#include "node/exchange/trainer_state_wire.h"

namespace chorus::node {
namespace {

// Rank 0's running statistics and batch count to every member, in one
// message (trainer_state_wire.h).
Status TakeRankZeroState(const gossip::Collective& world, trainer::Model& model, gossip::Tag tag_base,
                         Deadline deadline) {
  const std::span<float> values = model.buffer_values();
  std::vector<std::byte> bytes = EncodeBatchNormState(values, model.num_batches_tracked());
  gossip::CollectiveOptions o;
  o.tag_base = tag_base;
  o.deadline = deadline;
  CHORUS_RETURN_IF_ERROR(world.Broadcast(std::span<std::byte>(bytes), 0, o).WithContext("BatchNorm state"));
  const Result<int64_t> tracked = ReadBatchNormState(bytes, values);
  if (!tracked) return tracked.error().WithContext("BatchNorm state from rank 0");
  model.set_num_batches_tracked(*tracked);
  return Status::Ok();
}

bool NothingToShare(const gossip::Collective& world, const trainer::Trainer& trainer) {
  return world.size() < 2 || trainer.model().buffers().empty();
}

}  // namespace

Status AverageBatchNormState(const gossip::Collective& world, trainer::Trainer& trainer, gossip::Tag tag_base,
                             Deadline deadline) {
  if (NothingToShare(world, trainer)) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(trainer.SyncToHost());  // a GPU holds the current statistics
  trainer::Model& model = trainer.model();
  gossip::AllreduceOptions sum;
  sum.algorithm = gossip::AllreduceAlgorithm::kRing;
  sum.tag_base = tag_base;
  sum.deadline = deadline;
  sum.post_scale = 1.0f / static_cast<float>(world.size());
  CHORUS_RETURN_IF_ERROR(world.Allreduce(model.buffer_values(), sum).WithContext("BatchNorm state"));
  CHORUS_RETURN_IF_ERROR(TakeRankZeroState(world, model, tag_base + gossip::kTagsPerCollective, deadline));
  return trainer.SyncToDevice();
}

Status BroadcastBatchNormState(const gossip::Collective& world, trainer::Trainer& trainer, gossip::Tag tag_base,
                               Deadline deadline) {
  if (NothingToShare(world, trainer)) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(trainer.SyncToHost());
  CHORUS_RETURN_IF_ERROR(TakeRankZeroState(world, trainer.model(), tag_base, deadline));
  return trainer.SyncToDevice();
}

}  // namespace chorus::node
