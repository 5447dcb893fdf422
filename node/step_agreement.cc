// Agreeing on the step to resume from after a re-form (see step_agreement.h).
#include "node/step_agreement.h"

#include <algorithm>
#include <vector>

namespace chorus::node {

Result<int64_t> AgreeOnResumeStep(const gossip::Collective& collective, int world_size, int self_rank,
                                  int64_t next_step, uint64_t epoch, Deadline deadline) {
  if (next_step < 0 || next_step >= (int64_t{1} << 24)) {
    return Err(OutOfRange("resume step " + std::to_string(next_step) + " is outside [0, 2^24)"));
  }
  std::vector<float> steps(static_cast<size_t>(world_size), 0.0f);
  steps[static_cast<size_t>(self_rank)] = static_cast<float>(next_step);
  gossip::AllreduceOptions o;
  o.algorithm = gossip::AllreduceAlgorithm::kRing;
  o.tag_base = ResumeStepTagBase(epoch);
  o.deadline = deadline;
  CHORUS_RETURN_IF_ERROR(collective.Allreduce(std::span<float>(steps), o));
  return static_cast<int64_t>(*std::max_element(steps.begin(), steps.end()));
}

}  // namespace chorus::node
