// VirtualConsensusBoard (see consensus_board.h).
#include "node/lab/simulate/consensus_board.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace chorus::node {

void VirtualConsensusBoard::Watch(const std::vector<int64_t>& steps) {
  WatchByRank(std::vector<std::vector<int64_t>>(static_cast<size_t>(nodes_), steps));
}

void VirtualConsensusBoard::WatchByRank(const std::vector<std::vector<int64_t>>& steps_by_rank) {
  std::lock_guard<std::mutex> lock(mu_);
  steps_by_rank_ = steps_by_rank;
  steps_by_rank_.resize(static_cast<size_t>(nodes_));
  size_t points = steps_by_rank_.empty() ? 0 : steps_by_rank_[0].size();
  for (const auto& steps : steps_by_rank_) points = std::min(points, steps.size());
  pending_.assign(points, Pending{});
  for (Pending& p : pending_) p.copies.resize(static_cast<size_t>(nodes_));
}

int VirtualConsensusBoard::PointLocked(int rank, int64_t step) const {
  if (rank < 0 || rank >= static_cast<int>(steps_by_rank_.size())) return -1;
  const std::vector<int64_t>& steps = steps_by_rank_[static_cast<size_t>(rank)];
  const size_t k = static_cast<size_t>(std::find(steps.begin(), steps.end(), step) - steps.begin());
  return k < pending_.size() ? static_cast<int>(k) : -1;
}

void VirtualConsensusBoard::Deposit(int64_t step, int rank, std::span<const float> master) {
  std::unique_lock<std::mutex> lock(mu_);
  const int k = PointLocked(rank, step);
  if (k < 0) return;
  Pending& p = pending_[static_cast<size_t>(k)];
  std::vector<float>& copy = p.copies[static_cast<size_t>(rank)];
  if (!copy.empty()) return;  // one copy per node and step
  lock.unlock();
  std::vector<float> mine(master.begin(), master.end());
  lock.lock();
  copy = std::move(mine);
  if (++p.deposited < nodes_) return;
  p.distance = Compute(p.copies);
  p.done = true;
  p.copies.clear();
  p.copies.shrink_to_fit();
  cv_.notify_all();
}

void VirtualConsensusBoard::Finished(int64_t step, int rank, std::span<const float> master) {
  std::vector<int64_t> later;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank < 0 || rank >= static_cast<int>(steps_by_rank_.size())) return;
    for (int64_t s : steps_by_rank_[static_cast<size_t>(rank)]) {
      if (s > step) later.push_back(s);
    }
  }
  for (int64_t s : later) Deposit(s, rank, master);
}

double VirtualConsensusBoard::Distance(int rank, int64_t step, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  const int k = PointLocked(rank, step);
  if (k < 0) return -1.0;
  const Pending& p = pending_[static_cast<size_t>(k)];
  const bool done = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return p.done; });
  return done ? p.distance : -1.0;
}

double VirtualConsensusBoard::Compute(const std::vector<std::vector<float>>& copies) {
  const size_t n = copies.size();
  const size_t len = copies.front().size();
  std::vector<double> mean(len, 0.0);
  for (const std::vector<float>& x : copies) {
    if (x.size() != len) return -1.0;
    for (size_t i = 0; i < len; ++i) mean[i] += x[i];
  }
  double mean_sq = 0.0;
  for (double& m : mean) {
    m /= static_cast<double>(n);
    mean_sq += m * m;
  }
  double worst = 0.0;
  for (const std::vector<float>& x : copies) {
    double d = 0.0;
    for (size_t i = 0; i < len; ++i) d += (x[i] - mean[i]) * (x[i] - mean[i]);
    worst = std::max(worst, d);
  }
  const double norm = std::sqrt(mean_sq);
  return norm > 0.0 ? std::sqrt(worst) / norm : std::sqrt(worst);
}

}  // namespace chorus::node
