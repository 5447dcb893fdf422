// See mean_gradient_barrier.h.
#include "node/lab/simulate/mean_gradient_barrier.h"

#include <chrono>

namespace chorus::node {

std::span<const float> MeanGradientBarrier::Arrive(int rank, std::span<const float> gradient) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t generation = generation_;
  std::vector<float>& mean = mean_[generation % 2];
  if (given_.size() != static_cast<size_t>(members_)) given_.resize(static_cast<size_t>(members_));
  given_.at(static_cast<size_t>(rank)).assign(gradient.begin(), gradient.end());
  if (++arrived_ < members_) {
    const bool done = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s_),
                                   [&] { return generation_ != generation; });
    return done ? std::span<const float>(mean) : std::span<const float>();
  }
  std::vector<double> sum;
  int contributed = 0;
  for (std::vector<float>& g : given_) {
    if (g.empty()) continue;
    if (sum.empty()) sum.assign(g.size(), 0.0);
    for (size_t i = 0; i < g.size() && i < sum.size(); ++i) sum[i] += g[i];
    ++contributed;
    g.clear();
  }
  mean.assign(sum.size(), 0.0f);
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / contributed);
  arrived_ = 0;
  ++generation_;
  cv_.notify_all();
  return mean;
}

}  // namespace chorus::node
