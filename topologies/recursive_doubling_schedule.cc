// Recursive doubling schedule with the non-power-of-two fold. See
// recursive_doubling_schedule.h.
#include "topologies/recursive_doubling_schedule.h"

#include <string>
#include <vector>

namespace chorus::topologies {

Result<std::vector<RecursiveDoublingStep>> RecursiveDoublingSchedule(int rank, int n) {
  if (n < 1 || rank < 0 || rank >= n) {
    return Err(InvalidArgument("recursive-doubling schedule: rank " + std::to_string(rank) +
                               " is not among " + std::to_string(n) + " ranks"));
  }
  int p2 = 1;
  while (p2 <= n / 2) p2 *= 2;
  const int rem = n - p2;
  using Phase = RecursiveDoublingPhase;
  std::vector<RecursiveDoublingStep> steps;

  if (rank < 2 * rem && rank % 2 == 0) {  // folded away: hand over, wait for the result
    steps.push_back({Phase::kFoldIn, rank + 1, /*send=*/true, /*recv=*/false, true, 0});
    steps.push_back({Phase::kFoldOut, rank + 1, /*send=*/false, /*recv=*/true, false, 0});
    return steps;
  }
  if (rank < 2 * rem) {
    steps.push_back({Phase::kFoldIn, rank - 1, /*send=*/false, /*recv=*/true, true, 0});
  }
  const int v = rank < 2 * rem ? rank / 2 : rank - rem;
  auto real_rank = [rem](int virtual_rank) {
    return virtual_rank < rem ? 2 * virtual_rank + 1 : virtual_rank + rem;
  };
  int round = 0;
  for (int mask = 1; mask < p2; mask *= 2, ++round) {
    steps.push_back(
        {Phase::kExchange, real_rank(v ^ mask), /*send=*/true, /*recv=*/true, true, round});
  }
  if (rank < 2 * rem) {
    steps.push_back({Phase::kFoldOut, rank - 1, /*send=*/true, /*recv=*/false, false, 0});
  }
  return steps;
}

}  // namespace chorus::topologies
