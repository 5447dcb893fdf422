// Recursive halving-doubling all-reduce schedule (Rabenseifner; Thakur, Rabenseifner
// and Gropp 2005), for any number of ranks.
//
// Let p2 be the largest power of two <= n and rem = n - p2.
//  1. Fold: among the first 2*rem ranks, each even rank r sends its whole buffer to
//     r + 1, which adds it in; the even ranks then sit out. The p2 ranks left take
//     virtual ranks v: odd r < 2*rem -> r / 2, r >= 2*rem -> r - rem.
//  2. Reduce-scatter by recursive halving over blocks = PartitionChunks(length, p2):
//     for mask = p2/2, p2/4, .., 1, exchange with virtual partner v ^ mask, keeping the
//     lower half of the current block range when (v & mask) == 0 and the upper half
//     otherwise; send the other half, add in the half received. Virtual rank v ends
//     with block v fully reduced.
//  3. All-gather by recursive doubling: for mask = 1, 2, .., p2/2, send the blocks held
//     to v ^ mask and copy in the partner's equally sized, adjacent blocks.
//  4. Unfold: each odd rank r < 2*rem sends the whole result to r - 1.
// Each step lists element ranges; ranges can be empty when length < p2 (the step is
// still listed, so both sides of an exchange agree). Pure and std only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "topologies/chunking.h"

namespace chorus::topologies {

enum class HalvingDoublingPhase { kFold, kReduceScatter, kAllGather, kUnfold };

struct HalvingDoublingStep {
  HalvingDoublingPhase phase = HalvingDoublingPhase::kReduceScatter;
  int peer = 0;       // a real rank
  Range send;         // elements sent to peer (empty: nothing to send this step)
  Range recv;         // elements received from peer (empty: nothing to receive)
  bool reduce = true; // true: add the received elements in; false: overwrite
};

// The steps of `rank` in order. Needs n >= 1, 0 <= rank < n and length >= 0.
Result<std::vector<HalvingDoublingStep>> HalvingDoublingSchedule(int rank, int n, int64_t length);

}  // namespace chorus::topologies
