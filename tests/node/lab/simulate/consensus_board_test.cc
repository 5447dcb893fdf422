// Tests of the simulator's exact consensus distance: the board's result
// against the closed form, from nodes that leave their copies on their own
// threads in any order.
#include "node/lab/simulate/consensus_board.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace chorus::node {
namespace {

// Node r holds (r + 1) v with v = [3, 4] (||v|| = 5): the mean is 2.5 v over
// 4 nodes and the farthest nodes (0 and 3) are 1.5 ||v|| from it, so the
// distance is 1.5 / 2.5 = 0.6.
TEST(VirtualConsensusBoardTest, DistanceOfEveryNodesCopyAtTheWatchedSteps) {
  const int n = 4;
  VirtualConsensusBoard board(n);
  board.Watch({10, 20});
  std::vector<double> seen(n, -2.0);
  std::vector<std::thread> nodes;
  for (int r = n - 1; r >= 0; --r) {
    nodes.emplace_back([&, r] {
      const float k = static_cast<float>(r + 1);
      board.Deposit(5, r, std::vector<float>{k, k});  // not watched: ignored
      board.Deposit(10, r, std::vector<float>{3 * k, 4 * k});
      seen[r] = board.Distance(10, 30.0);
      board.Deposit(20, r, std::vector<float>{1.0f, 2.0f});  // identical replicas
    });
  }
  for (std::thread& t : nodes) t.join();
  for (int r = 0; r < n; ++r) EXPECT_NEAR(seen[r], 0.6, 1e-12) << r;
  EXPECT_EQ(board.Distance(20, 1.0), 0.0);
  EXPECT_EQ(board.Distance(5, 1.0), -1.0);  // a step the board does not watch
}

TEST(VirtualConsensusBoardTest, ANodeThatNeverLeavesItsCopyEndsTheWaitAtTheTimeout) {
  VirtualConsensusBoard board(2);
  board.Watch({1});
  board.Deposit(1, 0, std::vector<float>{1.0f});
  EXPECT_EQ(board.Distance(1, 0.05), -1.0);
}

}  // namespace
}  // namespace chorus::node
