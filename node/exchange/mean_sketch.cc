// See mean_sketch.h.
#include "node/exchange/mean_sketch.h"

#include <algorithm>
#include <limits>
#include <string>

#include "gossip/protocols/message_round.h"

namespace chorus::node {

Status MeanSketch::Start(std::span<const float> gradient, int64_t step) {
  if (!codec_) {
    CHORUS_ASSIGN_OR_RETURN(codec_, gossip::MakeCodec(gossip::CodecOptions{}));
  }
  offset_ = PeerGradientProducts::SketchOffset(seed_, step);
  PeerGradientProducts::Sketch(gradient, offset_, &average_);
  return Status::Ok();
}

Result<bool> MeanSketch::Round(gossip::Transport& transport, std::span<const int> to, std::span<const int> from,
                               gossip::Tag tag, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(codec_->Encode(average_, 0, &send_));
  inboxes_.resize(from.size());
  for (auto& inbox : inboxes_) inbox.assign(send_.size(), std::byte{0});
  CHORUS_RETURN_IF_ERROR(
      gossip::SwapExactly(transport, to, send_, from, tag, deadline, &inboxes_, "mean gradient sketch"));
  sum_.assign(average_.begin(), average_.end());
  theirs_.resize(average_.size());
  double count = 1.0;
  for (size_t k = 0; k < inboxes_.size(); ++k) {
    const Status decoded = codec_->Decode(inboxes_[k], theirs_);
    if (gossip::IsNonFiniteRejection(decoded)) {
      ++rejected_;
      continue;
    }
    CHORUS_RETURN_IF_ERROR(decoded.WithContext("mean gradient sketch from rank " + std::to_string(from[k])));
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += theirs_[i];
    count += 1.0;
  }
  for (size_t i = 0; i < sum_.size(); ++i) average_[i] = static_cast<float>(sum_[i] / count);
  return count == 1.0 + static_cast<double>(inboxes_.size());
}

void MeanSketch::Spoil() { std::fill(average_.begin(), average_.end(), std::numeric_limits<float>::quiet_NaN()); }

std::vector<double> MeanSketch::Squares() const {
  std::vector<double> squares(tensors_.size(), 0.0);
  PeerGradientProducts::AddProducts(average_, average_, tensors_, offset_, squares);
  return squares;
}

}  // namespace chorus::node
