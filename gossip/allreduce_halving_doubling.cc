// Recursive halving-doubling all-reduce (see allreduce_halving_doubling.h).
//
// `plan` (HalvingDoublingPlan) picks the largest power of two `power` <= n. The
// `extra` = n - power ranks 0, 2, .., 2*extra-2 fold: each sends its whole buffer
// to its right neighbour (phase kFoldIn), which adds it, and then waits for the
// result (kFoldOut). The `power` remaining ranks are renumbered `new_rank` and
// the buffer is cut into `power` `blocks`. Halving round r (mask = power/2,
// power/4, .., 1) pairs new_rank with new_rank ^ mask: each keeps half of its
// current block range [lo, hi) (the lower half if its mask bit is 0), sends the
// other half to the partner and adds the partner's copy of the kept half. After
// the last round rank new_rank holds the sum of block new_rank. Doubling rounds
// run the masks backwards (1, 2, .., power/2): each sends its range and receives
// the partner's adjacent one, doubling [lo, hi) until it covers every block.
// Every exchange moves in segments of options.segment_elems, receives posted
// options.inflight_segments ahead.
//
// Progress: every rank runs the same sequence of exchanges; sends never block,
// and a receive only needs the partner's sends of the same exchange. The halving
// sends are waited for before the doubling rounds receive into the same regions
// (their receivers need nothing more from this rank to take them).
#include "gossip/allreduce_halving_doubling.h"

#include <algorithm>
#include <string>

#include "gossip/collective_internal.h"
#include "gossip/collective_schedule.h"

namespace chorus::gossip {

namespace detail {

template <typename T>
Status HalvingDoublingSum(const CollectiveGroup& group, std::span<T> data,
                          const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  const int i = group.self();
  const size_t segment = std::max<size_t>(options.segment_elems, 1);
  const int window = std::max(options.inflight_segments, 1);
  const Deadline deadline = options.deadline;
  const HalvingDoublingPlan plan = HalvingDoublingPlan::Make(n);
  const int new_rank = plan.NewRank(i);
  const int fold_partner = plan.FoldPartner(i);
  std::vector<RequestPtr> sends;
  auto tag = [&](CollectivePhase phase, int step) {
    return CollectiveTag(options.tag_base, phase, static_cast<uint32_t>(step));
  };
  auto cspan = [](std::span<T> s) { return std::span<const T>(s); };

  if (new_rank < 0) {
    // Folded-out rank: hand the buffer over, then take the result back.
    CHORUS_RETURN_IF_ERROR(SendSegments(group, fold_partner, tag(CollectivePhase::kFoldIn, 0),
                                        cspan(data), segment, &sends));
    Status sent = WaitAll(sends, deadline);
    if (!sent.ok()) return sent.WithContext("halving-doubling fold-in send");
    return ReceiveSegments(group, fold_partner, tag(CollectivePhase::kFoldOut, 0), data,
                           /*reduce=*/false, segment, window, deadline,
                           "halving-doubling fold-out receive");
  }
  if (fold_partner >= 0) {
    CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, fold_partner, tag(CollectivePhase::kFoldIn, 0),
                                           data, /*reduce=*/true, segment, window, deadline,
                                           "halving-doubling fold-in receive"));
  }

  const int power = plan.power;
  const std::vector<ElemRange> blocks = BalancedPartition(data.size(), power);
  auto elems = [&](int block_lo, int block_hi) {
    const size_t begin = blocks[block_lo].begin;
    const size_t end = blocks[block_hi - 1].end();
    return data.subspan(begin, end - begin);
  };

  int lo = 0;
  int hi = power;
  int round = 0;
  for (int mask = power / 2; mask >= 1; mask /= 2, ++round) {
    const int partner = plan.OldRank(new_rank ^ mask);
    const int mid = (lo + hi) / 2;
    const bool upper = (new_rank & mask) != 0;
    const auto keep = upper ? elems(mid, hi) : elems(lo, mid);
    const auto give = upper ? elems(lo, mid) : elems(mid, hi);
    const Tag t = tag(CollectivePhase::kHalving, round);
    CHORUS_RETURN_IF_ERROR(SendSegments(group, partner, t, cspan(give), segment, &sends));
    CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, partner, t, keep, /*reduce=*/true, segment,
                                           window, deadline,
                                           "halving round " + std::to_string(round)));
    if (upper) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  Status halved = WaitAll(sends, deadline);
  if (!halved.ok()) return halved.WithContext("halving sends");
  sends.clear();

  round = 0;
  for (int mask = 1; mask < power; mask *= 2, ++round) {
    const int partner = plan.OldRank(new_rank ^ mask);
    const int width = hi - lo;
    const bool upper = (new_rank & mask) != 0;
    const int partner_lo = upper ? lo - width : hi;
    const Tag t = tag(CollectivePhase::kDoubling, round);
    CHORUS_RETURN_IF_ERROR(SendSegments(group, partner, t, cspan(elems(lo, hi)), segment, &sends));
    CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, partner, t, elems(partner_lo, partner_lo + width),
                                           /*reduce=*/false, segment, window, deadline,
                                           "doubling round " + std::to_string(round)));
    lo = std::min(lo, partner_lo);
    hi = lo + 2 * width;
  }

  if (fold_partner >= 0) {
    CHORUS_RETURN_IF_ERROR(SendSegments(group, fold_partner, tag(CollectivePhase::kFoldOut, 0),
                                        cspan(data), segment, &sends));
  }
  Status doubled = WaitAll(sends, deadline);
  if (!doubled.ok()) return doubled.WithContext("doubling sends");
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
