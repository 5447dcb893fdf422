// The model's non-trained state made one on every member (see batch_norm_state.h).
#include "node/exchange/batch_norm_state.h"

#include <cstring>
#include <vector>

namespace chorus::node {
namespace {

// Rank 0's running statistics and batch count to every member, in one
// message: the floats, then the count's 8 bytes.
Status TakeRankZeroState(const gossip::Collective& world, trainer::Model& model, gossip::Tag tag_base,
                         Deadline deadline) {
  const std::span<float> values = model.buffer_values();
  std::vector<std::byte> bytes(values.size_bytes() + sizeof(int64_t));
  int64_t tracked = model.num_batches_tracked();
  std::memcpy(bytes.data(), values.data(), values.size_bytes());
  std::memcpy(bytes.data() + values.size_bytes(), &tracked, sizeof(tracked));
  gossip::CollectiveOptions o;
  o.tag_base = tag_base;
  o.deadline = deadline;
  CHORUS_RETURN_IF_ERROR(world.Broadcast(std::span<std::byte>(bytes), 0, o).WithContext("BatchNorm state"));
  std::memcpy(values.data(), bytes.data(), values.size_bytes());
  std::memcpy(&tracked, bytes.data() + values.size_bytes(), sizeof(tracked));
  model.set_num_batches_tracked(tracked);
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
