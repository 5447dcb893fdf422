// VirtualConsensusBoard (see consensus_board.h).
#include "node/lab/simulate/consensus_board.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace chorus::node {

void VirtualConsensusBoard::Watch(const std::vector<int64_t>& steps) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t s : steps) pending_[s].copies.resize(static_cast<size_t>(nodes_));
}

void VirtualConsensusBoard::Deposit(int64_t step, int rank, std::span<const float> master) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pending_.find(step);
  if (it == pending_.end() || rank < 0 || rank >= nodes_) return;
  Pending& p = it->second;
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

double VirtualConsensusBoard::Distance(int64_t step, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pending_.find(step);
  if (it == pending_.end()) return -1.0;
  const bool done = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return it->second.done; });
  return done ? it->second.distance : -1.0;
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
