// Ring all-reduce schedule: which chunk each rank sends and receives at each step.
//
// The buffer is cut into n chunks (PartitionChunks(length, n)). Rank r sends to
// r + 1 and receives from r - 1 (mod n). Reduce-scatter, steps s = 0 .. n-2: send
// chunk (r - s) mod n, receive chunk (r - s - 1) mod n and add it into the local copy;
// afterwards rank r holds chunk (r + 1) mod n fully reduced. All-gather, steps
// s = 0 .. n-2: send chunk (r + 1 - s) mod n, receive chunk (r - s) mod n and overwrite
// the local copy. Each rank moves 2 (n-1)/n of the buffer. Indices only: the gossip/
// layer moves the bytes (and may pipeline each chunk in segments). Pure and std only.
#pragma once

#include <vector>

#include "common/status.h"

namespace chorus::topologies {

struct RingStep {
  int send_to = 0;     // (rank + 1) mod n
  int recv_from = 0;   // (rank - 1) mod n
  int send_chunk = 0;  // index into PartitionChunks(length, n)
  int recv_chunk = 0;  // reduced into (reduce-scatter) or copied over (all-gather)
};

struct RingSchedule {
  std::vector<RingStep> reduce_scatter;  // n - 1 steps
  std::vector<RingStep> all_gather;      // n - 1 steps
  int owned_chunk = 0;                   // fully reduced here after reduce-scatter
};

// The schedule of `rank` in a ring of n ranks. Needs n >= 1 and 0 <= rank < n.
Result<RingSchedule> RingAllreduceSchedule(int rank, int n);

}  // namespace chorus::topologies
