// Recursive halving-doubling schedule with the non-power-of-two fold. See
// halving_doubling_schedule.h.
#include "topologies/halving_doubling_schedule.h"

#include <string>
#include <vector>

#include "topologies/power_of_two_fold.h"

namespace chorus::topologies {

Result<std::vector<HalvingDoublingStep>> HalvingDoublingSchedule(int rank, int n, int64_t length) {
  if (n < 1 || rank < 0 || rank >= n) {
    return Err(InvalidArgument("halving-doubling schedule: rank " + std::to_string(rank) +
                               " is not among " + std::to_string(n) + " ranks"));
  }
  if (length < 0) {
    return Err(InvalidArgument("halving-doubling schedule: length " + std::to_string(length) +
                               " is negative"));
  }
  const PowerOfTwoFold fold(n);
  const int p2 = fold.p2;
  const Range whole{0, length};
  using Phase = HalvingDoublingPhase;
  std::vector<HalvingDoublingStep> steps;

  if (fold.SitsOut(rank)) {  // hand over, wait for the result
    steps.push_back({Phase::kFold, rank + 1, whole, Range{}, true});
    steps.push_back({Phase::kUnfold, rank + 1, Range{}, whole, false});
    return steps;
  }
  if (fold.HostsFolded(rank)) steps.push_back({Phase::kFold, rank - 1, Range{}, whole, true});

  const int v = fold.VirtualRank(rank);
  auto real_rank = [&fold](int virtual_rank) { return fold.RealRank(virtual_rank); };
  CHORUS_ASSIGN_OR_RETURN(std::vector<Range> blocks, PartitionChunks(length, p2));
  // Element range of blocks [first, last).
  auto span = [&blocks](int first, int last) {
    return Range{blocks[first].begin, blocks[last - 1].end};
  };

  int lo = 0, hi = p2;  // blocks this rank is responsible for
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const int peer = real_rank(v ^ mask);
    if ((v & mask) == 0) {
      steps.push_back({Phase::kReduceScatter, peer, span(mid, hi), span(lo, mid), true});
      hi = mid;
    } else {
      steps.push_back({Phase::kReduceScatter, peer, span(lo, mid), span(mid, hi), true});
      lo = mid;
    }
  }
  for (int mask = 1; mask < p2; mask *= 2) {
    const int size = hi - lo;
    const int peer = real_rank(v ^ mask);
    if ((v & mask) == 0) {
      steps.push_back({Phase::kAllGather, peer, span(lo, hi), span(hi, hi + size), false});
      hi += size;
    } else {
      steps.push_back({Phase::kAllGather, peer, span(lo, hi), span(lo - size, lo), false});
      lo -= size;
    }
  }
  if (fold.HostsFolded(rank)) steps.push_back({Phase::kUnfold, rank - 1, whole, Range{}, false});
  return steps;
}

}  // namespace chorus::topologies
