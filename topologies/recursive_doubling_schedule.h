// Recursive doubling all-reduce schedule (Thakur, Rabenseifner and Gropp 2005,
// the small-message algorithm of MPICH and Open MPI), for any number of ranks.
//
// Let p2 be the largest power of two <= n and rem = n - p2.
//  1. Fold-in: among the first 2*rem ranks, each even rank r sends its whole buffer
//     to r + 1, which adds it in; the even ranks then sit out. The p2 ranks left
//     take virtual ranks v as in HalvingDoublingSchedule: odd r < 2*rem -> r / 2,
//     r >= 2*rem -> r - rem.
//  2. Exchange: for mask = 1, 2, .., p2/2, send the whole buffer to virtual
//     partner v ^ mask and add the partner's whole buffer in. log2(p2) rounds of
//     one message each way: the fewest rounds, at the price of sending the whole
//     buffer every round (so for small buffers, where latency dominates).
//  3. Fold-out: each odd rank r < 2*rem sends the whole result to r - 1.
// Every step moves the whole buffer, so a step names only its peer and direction.
// Pure and std only.
#pragma once

#include <vector>

#include "common/status.h"

namespace chorus::topologies {

enum class RecursiveDoublingPhase { kFoldIn, kExchange, kFoldOut };

struct RecursiveDoublingStep {
  RecursiveDoublingPhase phase = RecursiveDoublingPhase::kExchange;
  int peer = 0;       // a real rank
  bool send = false;  // send the whole buffer to peer
  bool recv = false;  // receive the peer's whole buffer
  bool reduce = true; // true: add the received buffer in; false: overwrite
  int round = 0;      // kExchange: the round (log2 of mask), the same on both sides
};

// The steps of `rank` in order. Needs n >= 1 and 0 <= rank < n.
Result<std::vector<RecursiveDoublingStep>> RecursiveDoublingSchedule(int rank, int n);

}  // namespace chorus::topologies
