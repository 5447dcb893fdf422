// See peer_gradient_products.h.
#include "node/exchange/peer_gradient_products.h"

#include <algorithm>
#include <string>

#include "common/split_mix64.h"
#include "gossip/protocols/message_round.h"

namespace chorus::node {

size_t PeerGradientProducts::SketchOffset(uint64_t seed, int64_t step) {
  SplitMix64 draw(seed ^ (static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ULL));
  return static_cast<size_t>(draw.Below(kSketchStride));
}

void PeerGradientProducts::Sketch(std::span<const float> gradient, size_t offset, std::vector<float>* sketch) {
  sketch->clear();
  for (size_t i = offset; i < gradient.size(); i += kSketchStride) sketch->push_back(gradient[i]);
}

void PeerGradientProducts::AddProducts(std::span<const float> a, std::span<const float> b,
                                       std::span<const Tensor> tensors, size_t offset, std::span<double> products) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t t = 0; t < tensors.size() && t < products.size(); ++t) {
    const size_t begin = tensors[t].offset, end = tensors[t].offset + tensors[t].count;
    // The first sampled element at or after `begin`: offset + k * stride.
    size_t k = begin <= offset ? 0 : (begin - offset + kSketchStride - 1) / kSketchStride;
    double sum = 0.0;
    for (; k < n && offset + k * kSketchStride < end; ++k) sum += static_cast<double>(a[k]) * b[k];
    products[t] += static_cast<double>(kSketchStride) * sum;
  }
}

Result<int> SketchSwap::Swap(gossip::Transport& transport, std::span<const float> mine, std::span<const int> to,
                             std::span<const int> from, gossip::Tag tag, Deadline deadline, std::string_view what,
                             const std::function<void(std::span<const float>)>& take) {
  if (!codec_) {
    CHORUS_ASSIGN_OR_RETURN(codec_, gossip::MakeCodec(gossip::CodecOptions{}));
  }
  CHORUS_RETURN_IF_ERROR(codec_->Encode(mine, 0, &send_));
  inboxes_.resize(from.size());
  for (auto& inbox : inboxes_) inbox.assign(send_.size(), std::byte{0});
  CHORUS_RETURN_IF_ERROR(gossip::SwapExactly(transport, to, send_, from, tag, deadline, &inboxes_, what));
  theirs_.resize(mine.size());
  int taken = 0;
  for (size_t k = 0; k < inboxes_.size(); ++k) {
    const Status decoded = codec_->Decode(inboxes_[k], theirs_);
    if (gossip::IsNonFiniteRejection(decoded)) {
      ++rejected_;
      continue;
    }
    CHORUS_RETURN_IF_ERROR(decoded.WithContext(std::string(what) + " from rank " + std::to_string(from[k])));
    take(theirs_);
    ++taken;
  }
  return taken;
}

Result<std::vector<double>> PeerGradientProducts::Exchange(gossip::Transport& transport,
                                                           std::span<const float> gradient, std::span<const int> to,
                                                           std::span<const int> from, gossip::Tag tag,
                                                           Deadline deadline, int64_t step) {
  const size_t offset = SketchOffset(seed_, step);
  Sketch(gradient, offset, &mine_);
  std::vector<double> products(tensors_.size(), 0.0);
  CHORUS_ASSIGN_OR_RETURN(const int accepted,
                          swap_.Swap(transport, mine_, to, from, tag, deadline, "gradient sketch",
                                     [&](std::span<const float> theirs) {
                                       AddProducts(mine_, theirs, tensors_, offset, products);
                                     }));
  if (accepted == 0) return std::vector<double>();
  for (double& p : products) p /= accepted;
  return products;
}

}  // namespace chorus::node
