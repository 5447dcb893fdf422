// Recursive halving-doubling all-reduce (see allreduce_halving_doubling.h).
//
// The `steps` come from topologies::HalvingDoublingSchedule: with `power` the
// largest power of two <= n, the first 2(n - power) ranks fold pairwise (the even
// one hands its whole buffer to the odd one and sits out), the remaining power
// ranks run recursive halving (reduce-scatter: keep half of the block range,
// send the other half to the partner, add in the partner's copy of the kept half)
// and recursive doubling (all-gather: exchange the ranges held, doubling them),
// and the folded ranks get the result back. Each step posts the first receives
// of its `recv` range, then sends its `send` range, then receives (adding in,
// or copying over), both in segments of options.segment_elems with
// options.inflight_segments receives posted ahead.
// Tags: phase kFoldIn / kHalving / kDoubling / kFoldOut, step = the step's index
// within its phase, which is the same on both sides of every exchange.
//
// Progress: every rank runs its steps in schedule order; sends never block, and a
// receive only needs the partner's sends of the same step. Before a step that
// overwrites (doubling, unfold), every earlier send is waited for, since the
// region received may be one sent earlier; those sends' receivers need nothing
// more from this rank to take them, so this wait cannot close a cycle.
#include "gossip/collectives/allreduce_halving_doubling.h"

#include <algorithm>
#include <string>

#include "gossip/collectives/collective_internal.h"
#include "topologies/halving_doubling_schedule.h"

namespace chorus::gossip {

namespace detail {

namespace {

CollectivePhase PhaseOf(topologies::HalvingDoublingPhase phase) {
  switch (phase) {
    case topologies::HalvingDoublingPhase::kFold: return CollectivePhase::kFoldIn;
    case topologies::HalvingDoublingPhase::kReduceScatter: return CollectivePhase::kHalving;
    case topologies::HalvingDoublingPhase::kAllGather: return CollectivePhase::kDoubling;
    case topologies::HalvingDoublingPhase::kUnfold: return CollectivePhase::kFoldOut;
  }
  return CollectivePhase::kHalving;
}

const char* PhaseName(topologies::HalvingDoublingPhase phase) {
  switch (phase) {
    case topologies::HalvingDoublingPhase::kFold: return "fold-in";
    case topologies::HalvingDoublingPhase::kReduceScatter: return "halving";
    case topologies::HalvingDoublingPhase::kAllGather: return "doubling";
    case topologies::HalvingDoublingPhase::kUnfold: return "fold-out";
  }
  return "?";
}

}  // namespace

template <typename T>
Status HalvingDoublingSum(const CollectiveGroup& group, std::span<T> data,
                          const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  const size_t segment = std::max<size_t>(options.segment_elems, 1);
  const int window = std::max(options.inflight_segments, 1);
  CHORUS_ASSIGN_OR_RETURN(const std::vector<topologies::HalvingDoublingStep> steps,
                          topologies::HalvingDoublingSchedule(
                              group.self(), n, static_cast<int64_t>(data.size())));
  auto range = [&](const topologies::Range& r) {
    return data.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
  };

  std::vector<RequestPtr> sends;
  uint32_t index_in_phase = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const topologies::HalvingDoublingStep& step = steps[k];
    if (k > 0 && steps[k - 1].phase != step.phase) index_in_phase = 0;
    const std::string what =
        std::string(PhaseName(step.phase)) + " step " + std::to_string(index_in_phase);
    const Tag tag =
        CollectiveTag(options.tag_base, PhaseOf(step.phase), index_in_phase);
    ++index_in_phase;
    if (!step.reduce && !step.recv.empty()) {
      Status sent = WaitAll(sends, options.deadline);
      if (!sent.ok()) return sent.WithContext(what + ": earlier sends");
      sends.clear();
    }
    auto send = [&]() -> Status {
      if (step.send.empty()) return Status::Ok();
      Status s = SendSegments(group, step.peer, tag, std::span<const T>(range(step.send)), segment,
                              &sends);
      return s.ok() ? s : s.WithContext(what + " send");
    };
    if (step.recv.empty()) {
      CHORUS_RETURN_IF_ERROR(send());
    } else {
      // The receives go first, so that the partner's data finds them posted.
      CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, step.peer, tag, range(step.recv), step.reduce,
                                             segment, window, options.deadline,
                                             what + " receive", send));
    }
  }
  Status sent = WaitAll(sends, options.deadline);
  if (!sent.ok()) return sent.WithContext("halving-doubling final sends");
  return Status::Ok();
}

template Status HalvingDoublingSum<float>(const CollectiveGroup&, std::span<float>,
                                          const AllreduceOptions&);
template Status HalvingDoublingSum<uint16_t>(const CollectiveGroup&, std::span<uint16_t>,
                                             const AllreduceOptions&);

}  // namespace detail

Status AllreduceHalvingDoubling(const CollectiveGroup& group, std::span<float> data,
                                const AllreduceOptions& options) {
  return detail::RunAllreduce(group, data, options, "halving-doubling all-reduce",
                              [&] { return detail::HalvingDoublingSum(group, data, options); });
}

Status AllreduceHalvingDoubling(const CollectiveGroup& group, std::span<uint16_t> half,
                                const AllreduceOptions& options) {
  return detail::RunAllreduce(group, half, options, "halving-doubling all-reduce (fp16)",
                              [&] { return detail::HalvingDoublingSum(group, half, options); });
}

}  // namespace chorus::gossip
