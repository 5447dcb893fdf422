// Recursive doubling schedule with the non-power-of-two fold. See
// recursive_doubling_schedule.h.
#include "topologies/recursive_doubling_schedule.h"

#include <string>
#include <vector>

#include "topologies/power_of_two_fold.h"

namespace chorus::topologies {

Result<std::vector<RecursiveDoublingStep>> RecursiveDoublingSchedule(int rank, int n) {
  if (n < 1 || rank < 0 || rank >= n) {
    return Err(InvalidArgument("recursive-doubling schedule: rank " + std::to_string(rank) +
                               " is not among " + std::to_string(n) + " ranks"));
  }
  const PowerOfTwoFold fold(n);
  using Phase = RecursiveDoublingPhase;
  std::vector<RecursiveDoublingStep> steps;

  if (fold.SitsOut(rank)) {  // hand over, wait for the result
    steps.push_back({Phase::kFoldIn, rank + 1, /*send=*/true, /*recv=*/false, true, 0});
    steps.push_back({Phase::kFoldOut, rank + 1, /*send=*/false, /*recv=*/true, false, 0});
    return steps;
  }
  if (fold.HostsFolded(rank)) {
    steps.push_back({Phase::kFoldIn, rank - 1, /*send=*/false, /*recv=*/true, true, 0});
  }
  const int v = fold.VirtualRank(rank);
  int round = 0;
  for (int mask = 1; mask < fold.p2; mask *= 2, ++round) {
    steps.push_back(
        {Phase::kExchange, fold.RealRank(v ^ mask), /*send=*/true, /*recv=*/true, true, round});
  }
  if (fold.HostsFolded(rank)) {
    steps.push_back({Phase::kFoldOut, rank - 1, /*send=*/true, /*recv=*/false, false, 0});
  }
  return steps;
}

}  // namespace chorus::topologies
