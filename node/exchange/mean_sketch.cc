// See mean_sketch.h.
#include "node/exchange/mean_sketch.h"

#include <algorithm>
#include <limits>

namespace chorus::node {

void MeanSketch::Start(std::span<const float> gradient, int64_t step) {
  offset_ = PeerGradientProducts::SketchOffset(seed_, step);
  PeerGradientProducts::Sketch(gradient, offset_, &average_);
}

Result<bool> MeanSketch::Round(gossip::Transport& transport, std::span<const int> to, std::span<const int> from,
                               gossip::Tag tag, Deadline deadline) {
  sum_.assign(average_.begin(), average_.end());
  CHORUS_ASSIGN_OR_RETURN(const int taken,
                          swap_.Swap(transport, average_, to, from, tag, deadline, "mean gradient sketch",
                                     [&](std::span<const float> theirs) {
                                       for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += theirs[i];
                                     }));
  for (size_t i = 0; i < sum_.size(); ++i) average_[i] = static_cast<float>(sum_[i] / (1.0 + taken));
  return static_cast<size_t>(taken) == from.size();
}

void MeanSketch::Spoil() { std::fill(average_.begin(), average_.end(), std::numeric_limits<float>::quiet_NaN()); }

std::vector<double> MeanSketch::Squares() const {
  std::vector<double> squares(tensors_.size(), 0.0);
  PeerGradientProducts::AddProducts(average_, average_, tensors_, offset_, squares);
  return squares;
}

}  // namespace chorus::node
