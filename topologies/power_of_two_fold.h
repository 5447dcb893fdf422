// The non-power-of-two fold of the recursive all-reduce schedules (Thakur,
// Rabenseifner and Gropp 2005), shared by HalvingDoublingSchedule and
// RecursiveDoublingSchedule: with p2 the largest power of two <= n and
// rem = n - p2, each even rank r < 2*rem hands its buffer to r + 1 and sits
// out; the p2 ranks left run the power-of-two algorithm under virtual ranks
// (odd r < 2*rem -> r / 2, r >= 2*rem -> r - rem). Pure and std only.
#pragma once

namespace chorus::topologies {

struct PowerOfTwoFold {
  // Needs n >= 1.
  explicit PowerOfTwoFold(int n) {
    while (p2 <= n / 2) p2 *= 2;
    rem = n - p2;
  }
  // Hands its buffer to rank + 1 and gets the result back from it.
  bool SitsOut(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  // Takes the buffer of rank - 1 first and gives it the result at the end.
  bool HostsFolded(int rank) const { return rank < 2 * rem && rank % 2 == 1; }
  // For ranks that do not sit out.
  int VirtualRank(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  int RealRank(int virtual_rank) const {
    return virtual_rank < rem ? 2 * virtual_rank + 1 : virtual_rank + rem;
  }

  int p2 = 1;
  int rem = 0;
};

}  // namespace chorus::topologies
