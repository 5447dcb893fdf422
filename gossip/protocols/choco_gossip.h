// ChocoGossip: compressed gossip that still reaches the exact average
// (CHOCO-gossip / CHOCO-SGD, Koloskova, Stich and Jaggi 2019).
//
// Each node keeps public copies x_hat_j (n floats each) of itself and of every
// neighbour, all 0 at the start; every node holds bit-identical copies of a given
// x_hat_j because they are all updated from the same bytes by the same
// deterministic decoder. Per communicating round node i (after its local step):
//   q_i = Q(x_i - x_hat_i)                  Q = the codec (any kind)
//   send q_i to the neighbours, receive their q_j
//   x_hat_j += q_j                          for j = i and each neighbour
//   x_i += gamma * sum_j W_ij (x_hat_j - x_hat_i)
// with Metropolis-Hastings weights W over an undirected graph. Error feedback is
// implicit: what Q dropped stays in x_i - x_hat_i and is sent in later rounds, so
// x_hat_i tracks x_i and the x_i reach consensus. sum_i x_i is unchanged by a
// round (W symmetric, copies identical), so consensus is at the exact average.
// gamma (consensus step size) must shrink with the codec's quality: about 1 for
// lossless, smaller for sign or top-k with small ratios (see the tests).
//
// A q_j that decodes to non-finite values is rejected and counted; since node j
// decodes its own message the same way, it rejects it too, so no copy diverges.
// Stats().neighbor_distance: ||x_i - mean_j x_hat_j|| / ||x_i|| over the
// neighbours' public copies after the round's update, before mixing.
//
// SetTopology resets every public copy to 0 (all members do it at the same epoch).
//
// Must not: keep references to params between calls or block without a deadline.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gossip/codecs/codec.h"
#include "gossip/protocols/gossip_protocol.h"
#include "gossip/protocols/gossip_tags.h"
#include "topologies/mixing_weights.h"

namespace chorus::gossip {

// The common settings (gossip_protocol.h) with `codec` as the compression
// operator Q (default: sign with a scale per 256 elements), plus gamma.
struct ChocoOptions : GossipOptions {
  ChocoOptions() { codec = CodecOptions{CodecKind::kSign}; }
  // Consensus step size gamma in (0, 1].
  double gamma = 0.5;
};

class ChocoGossip final : public GossipProtocol {
 public:
  // Needs an undirected graph with transport.size() nodes.
  static Result<std::unique_ptr<ChocoGossip>> Create(Transport& transport, topologies::Graph graph,
                                                     const ChocoOptions& options);

  std::string_view Name() const override { return "choco"; }
  [[nodiscard]] Status Mix(std::span<float> params, int64_t round, Deadline deadline) override;
  [[nodiscard]] Status SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) override;

  // The public copy x_hat of this node (empty before the first Mix).
  std::span<const float> public_copy() const {
    return hats_.empty() ? std::span<const float>() : std::span<const float>(hats_[0]);
  }

 private:
  ChocoGossip(Transport& transport, topologies::Graph graph, const ChocoOptions& options,
              std::unique_ptr<Codec> codec)
      : GossipProtocol(transport),
        graph_(std::move(graph)),
        options_(options),
        codec_(std::move(codec)) {}
  Status Install(topologies::Graph graph, uint32_t epoch);

  topologies::Graph graph_;
  ChocoOptions options_;
  std::unique_ptr<Codec> codec_;
  double self_weight_ = 1.0;
  std::vector<int> neighbors_;
  std::vector<double> neighbor_weights_;  // W_ij, same order as neighbors_
  std::vector<std::vector<float>> hats_;  // [0] = self, [1 + k] = neighbors_[k]
  std::vector<float> diff_;
  std::vector<float> q_;
  std::vector<const float*> hat_rows_;  // hats_[1..], for StepTowards
  std::vector<std::byte> send_;
  std::vector<std::vector<std::byte>> inboxes_;
};

}  // namespace chorus::gossip
