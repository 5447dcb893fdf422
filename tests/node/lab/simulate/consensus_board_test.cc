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
      seen[r] = board.Distance(r, 10, 30.0);
      board.Deposit(20, r, std::vector<float>{1.0f, 2.0f});  // identical replicas
    });
  }
  for (std::thread& t : nodes) t.join();
  for (int r = 0; r < n; ++r) EXPECT_NEAR(seen[r], 0.6, 1e-12) << r;
  EXPECT_EQ(board.Distance(0, 20, 1.0), 0.0);
  EXPECT_EQ(board.Distance(0, 5, 1.0), -1.0);  // a step the board does not watch
}

// Nodes at their own pace meet at their k-th points after different step
// counts: node 0's 4th step and node 1's 2nd are one point; a node that
// stops before a point leaves its last weights for it.
TEST(VirtualConsensusBoardTest, PointsByRankPairTheNodesOwnSteps) {
  VirtualConsensusBoard board(2);
  board.WatchByRank({{4, 8}, {2, 4}});
  board.Deposit(4, 0, std::vector<float>{1.0f, 0.0f});
  board.Deposit(4, 1, std::vector<float>{1.0f, 0.0f});  // node 1's second point
  board.Deposit(2, 1, std::vector<float>{3.0f, 0.0f});  // its first: with node 0's step 4
  EXPECT_NEAR(board.Distance(0, 4, 1.0), 0.5, 1e-12);   // mean 2: each 1 away, over 2
  EXPECT_NEAR(board.Distance(1, 2, 1.0), 0.5, 1e-12);
  EXPECT_EQ(board.Distance(0, 8, 0.05), -1.0);          // node 0 has not reached step 8
  EXPECT_EQ(board.Distance(1, 8, 1.0), -1.0);           // not one of node 1's points
  // Node 0 stops after 6 steps: its last weights stand for its point at 8.
  board.Finished(6, 0, std::vector<float>{1.0f, 0.0f});
  board.Finished(4, 1, std::vector<float>{5.0f, 0.0f});  // every point reached: no copy
  EXPECT_EQ(board.Distance(0, 8, 1.0), 0.0);
}

TEST(VirtualConsensusBoardTest, ANodeThatNeverLeavesItsCopyEndsTheWaitAtTheTimeout) {
  VirtualConsensusBoard board(2);
  board.Watch({1});
  board.Deposit(1, 0, std::vector<float>{1.0f});
  EXPECT_EQ(board.Distance(0, 1, 0.05), -1.0);
}

}  // namespace
}  // namespace chorus::node
