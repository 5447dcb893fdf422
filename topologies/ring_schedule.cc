// Ring all-reduce schedule. See ring_schedule.h.
#include "topologies/ring_schedule.h"

#include <string>

namespace chorus::topologies {

Result<RingSchedule> RingAllreduceSchedule(int rank, int n) {
  if (n < 1 || rank < 0 || rank >= n) {
    return Err(InvalidArgument("ring schedule: rank " + std::to_string(rank) +
                               " is not in a ring of " + std::to_string(n) + " ranks"));
  }
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  RingSchedule schedule;
  schedule.owned_chunk = mod(rank + 1);
  for (int s = 0; s + 1 < n; ++s) {
    schedule.reduce_scatter.push_back(
        RingStep{mod(rank + 1), mod(rank - 1), mod(rank - s), mod(rank - s - 1)});
    schedule.all_gather.push_back(
        RingStep{mod(rank + 1), mod(rank - 1), mod(rank + 1 - s), mod(rank - s)});
  }
  return schedule;
}

}  // namespace chorus::topologies
