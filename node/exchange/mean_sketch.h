// MeanSketch: what train.lars_norm = "mean-sketch" takes from the gossip
// graph at every step. Each tensor's squared norm of the members' mean
// gradient of this step, the norm an all-reduce node's LARS sees, from a
// sketch of every member's gradient averaged exactly along the graph.
//
// The sketch is PeerGradientProducts's: every kSketchStride-th element of the
// flat gradient from the step's offset, the same on every node, so stride
// times the sum of a tensor's squared sampled mean elements is an unbiased
// estimate of its squared norm (1/32 of the gradient: 29 KB for the MLP).
// The sketches are averaged in `rounds` rounds of the graph within the step:
// at round k a node sends its average to the out-neighbours of the graph's
// round k and keeps the mean of its own and its in-neighbours'. On the
// one-peer exponential graph over n = 2^L members (round k: out-neighbour
// i + 2^k) L rounds make every node's average the exact mean of all n
// sketches; on the complete graph one round does. So the norm is this
// step's realized one (not an expectation over steps), for `rounds`
// sketches sent a step, one after another.
//
// A non-finite sketch from an in-neighbour (an overflow, a poisoner) spoils
// the step's estimate: the node's own norm is used then. The node still
// sends in every round, which its out-neighbours wait for, but NaN, so that
// every average the spoiled one would have entered is spoiled too (left
// out, it would make theirs a wrong mean rather than none).
//
// Must not: block without a deadline; not thread-safe (the training thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/transport/transport.h"
#include "node/exchange/peer_gradient_products.h"
#include "topologies/graph.h"

namespace chorus::node {

class MeanSketch {
 public:
  using Tensor = PeerGradientProducts::Tensor;

  // `rounds` >= 1: the graph's rounds that make a mean (its period for the
  // one-peer exponential graph, 1 for the complete graph).
  MeanSketch(std::vector<Tensor> tensors, uint64_t seed, int rounds)
      : tensors_(std::move(tensors)), seed_(seed), rounds_(rounds < 1 ? 1 : rounds) {}

  // This node (`self` on `graph`) averages its sketch of `gradient` at `step`
  // with the other members' in rounds 0 .. rounds - 1 of `graph`, on tags
  // tag_of(round); returns each tensor's estimated squared norm of the mean
  // gradient, or an empty vector when a sketch was not finite. A transport
  // failure is returned as it is.
  template <typename TagOf>
  [[nodiscard]] Result<std::vector<double>> Step(gossip::Transport& transport, std::span<const float> gradient,
                                                 const topologies::Graph& graph, int self, TagOf tag_of,
                                                 Deadline deadline, int64_t step) {
    Start(gradient, step);
    bool finite = true;
    for (int k = 0; k < rounds_; ++k) {
      CHORUS_ASSIGN_OR_RETURN(const bool round_finite, Round(transport, graph.OutNeighbors(self, k),
                                                             graph.InNeighbors(self, k), tag_of(k), deadline));
      if (!round_finite) Spoil();
      finite = finite && round_finite;
    }
    return finite ? Squares() : std::vector<double>();
  }

  int rounds() const { return rounds_; }
  uint64_t rejected() const { return swap_.rejected(); }  // in-neighbours' sketches left out (non-finite)

 private:
  // The step's sketch of `gradient` becomes this node's average.
  void Start(std::span<const float> gradient, int64_t step);
  // One round; false when an in-neighbour's average was not finite (it is
  // left out of this node's average, which is no longer the mean).
  [[nodiscard]] Result<bool> Round(gossip::Transport& transport, std::span<const int> to, std::span<const int> from,
                                   gossip::Tag tag, Deadline deadline);
  std::vector<double> Squares() const;
  void Spoil();  // this node's average becomes NaN

  std::vector<Tensor> tensors_;
  uint64_t seed_;
  int rounds_;
  size_t offset_ = 0;           // the step's sketch offset
  std::vector<float> average_;  // this node's average of the step's sketches
  std::vector<double> sum_;
  SketchSwap swap_;
};

}  // namespace chorus::node
