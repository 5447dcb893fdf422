// PeerGradientProducts: what train.lars_norm = "peer" takes from the gossip
// graph at every step. Each tensor's product <g_i, g_j> of this node's
// gradient with its peers' gradients of the same step, for LARS's estimate of
// the global batch's gradient norm (trainer/optimizer.h, peer_products): two
// nodes' gradients are taken from independent samples at nearly the same
// point, so their product estimates ||E g||^2 without the bias of one node's
// successive gradients at a large lr.
//
// A peer gets a sketch, not the gradient: every kSketchStride-th element of
// the flat gradient, from an offset drawn per step from the seed (the same
// on every node). Every element is sampled with probability 1 / stride over
// the draw, so stride * (the sum of a tensor's sampled products) is an
// unbiased estimate of the tensor's product. FP32, size / stride floats to
// each of the step's out-neighbours (3% of an FP32 model's bytes), from each
// in-neighbour, in the dense codec's wire format (gossip/codecs/codec.h:
// its header, size and finiteness checks).
//
// A sketch with a non-finite value (a poisoned or overflowed peer) is left
// out; a large one can only raise the product, and the optimizer clamps it
// to the node's own norm, so a peer cannot make this node's step larger.
//
// Must not: block without a deadline; not thread-safe (the training thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/codecs/codec.h"
#include "gossip/transport/transport.h"

namespace chorus::node {

// One swap of gradient sketches with the step's graph peers, in the dense
// codec's wire format (its header, size and finiteness checks): what the
// peer norm and the mean-gradient norm (mean_sketch.h) both send. Keeps the
// buffers from swap to swap.
class SketchSwap {
 public:
  // Sends `mine` to `to`, receives a sketch of its size from each of `from`
  // (on `tag`) and calls take(theirs) with each finite one; a non-finite one
  // is left out and counted. Returns how many were taken. A transport or
  // format failure is returned as it is, naming `what` and the peer.
  [[nodiscard]] Result<int> Swap(gossip::Transport& transport, std::span<const float> mine, std::span<const int> to,
                                 std::span<const int> from, gossip::Tag tag, Deadline deadline, std::string_view what,
                                 const std::function<void(std::span<const float>)>& take);
  uint64_t rejected() const { return rejected_; }  // peers' sketches left out (non-finite)

 private:
  std::unique_ptr<gossip::Codec> codec_;  // none: FP32 as it is
  std::vector<std::byte> send_;
  std::vector<std::vector<std::byte>> inboxes_;
  std::vector<float> theirs_;
  uint64_t rejected_ = 0;
};

class PeerGradientProducts {
 public:
  static constexpr size_t kSketchStride = 32;
  struct Tensor {
    size_t offset = 0;  // in the flat gradient
    size_t count = 0;
  };

  PeerGradientProducts(std::vector<Tensor> tensors, uint64_t seed) : tensors_(std::move(tensors)), seed_(seed) {}

  // The sketch's first element at `step`, in [0, kSketchStride): the same on every node.
  static size_t SketchOffset(uint64_t seed, int64_t step);
  // Every kSketchStride-th element of `gradient` from `offset`.
  static void Sketch(std::span<const float> gradient, size_t offset, std::vector<float>* sketch);
  // Adds, for each tensor, kSketchStride times the sum of the products of the
  // sampled elements of `a` and `b` (sketches from `offset`) in it.
  static void AddProducts(std::span<const float> a, std::span<const float> b, std::span<const Tensor> tensors,
                          size_t offset, std::span<double> products);

  // Sends this node's sketch of `gradient` to `to` and receives one from each
  // of `from` (on `tag`); returns each tensor's product averaged over the
  // peers whose sketch was finite, or an empty vector when none was. A
  // transport failure is returned as it is.
  [[nodiscard]] Result<std::vector<double>> Exchange(gossip::Transport& transport, std::span<const float> gradient,
                                                     std::span<const int> to, std::span<const int> from,
                                                     gossip::Tag tag, Deadline deadline, int64_t step);

  uint64_t rejected() const { return swap_.rejected(); }  // peers' sketches left out (non-finite)

 private:
  std::vector<Tensor> tensors_;
  uint64_t seed_;
  SketchSwap swap_;
  std::vector<float> mine_;
};

}  // namespace chorus::node
