// VirtualConsensusBoard: the exact consensus distance of a simulation's
// nodes, which all live in one process: at each evaluation point every node
// leaves a copy of its master weights, and the distance
// max_i ||x_i - x_mean|| / ||x_mean|| (gossip/protocols/consensus.h's) is
// computed from the copies without a message, whatever the method (a
// collective would need every node to evaluate at the same step; in a
// simulation only a sample does).
//
// Must not: send messages or move a virtual clock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace chorus::node {

class VirtualConsensusBoard {
 public:
  explicit VirtualConsensusBoard(int nodes) : nodes_(nodes) {}
  // The nodes leave copies at `steps` (step counts, as the training loop's
  // evaluations are scheduled), the same for every node. Before the nodes start.
  void Watch(const std::vector<int64_t>& steps);
  // Point k is node r's steps_by_rank[r][k] (nodes at their own pace reach
  // their k-th points after their own numbers of steps; every list as long).
  void WatchByRank(const std::vector<std::vector<int64_t>>& steps_by_rank);

  // Node `rank` has completed `step` steps with weights `master`; copied
  // when that is one of its points, ignored otherwise.
  void Deposit(int64_t step, int rank, std::span<const float> master);
  // Node `rank` trained its last step (`step` steps) with weights `master`:
  // the copy for each of its points past `step`. Nodes at their own pace
  // stop at one moment, some before their last point's step (its share is
  // a prediction from compute alone); their weights then are that point's.
  void Finished(int64_t step, int rank, std::span<const float> master);
  // The distance at node `rank`'s point after `step` steps, once every node
  // has left its copy for that point; waits at most `timeout_s` (a node that
  // failed never leaves one) and then gives -1, as for a step that is not
  // one of the node's points.
  double Distance(int rank, int64_t step, double timeout_s);

 private:
  struct Pending {
    std::vector<std::vector<float>> copies;  // by rank
    int deposited = 0;
    double distance = -1.0;
    bool done = false;
  };
  static double Compute(const std::vector<std::vector<float>>& copies);
  // The point of node `rank` after `step` steps, or -1 (mu_ held).
  int PointLocked(int rank, int64_t step) const;

  const int nodes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<int64_t>> steps_by_rank_;
  std::vector<Pending> pending_;  // one entry per point
};

}  // namespace chorus::node
