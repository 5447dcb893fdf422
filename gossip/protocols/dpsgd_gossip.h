// DpsgdGossip: synchronous decentralized averaging (D-PSGD, Lian et al. 2017).
//
// Per communicating round every node i sends its x_i to each neighbour j of an
// undirected graph, receives every x_j, and sets
//   x_i <- sum_j W_ij x_j        (j over i and its neighbours)
// with Metropolis-Hastings weights W (topologies/mixing_weights.h): symmetric and
// doubly stochastic, so the sum of all x_i is unchanged by a round (up to float
// rounding: each element is accumulated in double and rounded once) and the
// x_i converge to their average at the rate of the spectral gap.
//
// Directed and time-varying graphs (one-peer exponential, SGP's graph) work
// too when they are regular: at every round every node has the same in- and
// out-degree d. Node i then sends to its out-neighbours of the round, receives
// from its in-neighbours, and uses the uniform weight 1/(d+1) for itself and
// each of them: every column of W also sums to 1 (each x_j reaches d nodes with
// weight 1/(d+1) and keeps 1/(d+1)), so W is doubly stochastic and the average
// is preserved. Other directed graphs need push-sum.
//
// A neighbour whose vector decodes to non-finite values is rejected (counted in
// Stats().rejected_nonfinite) and its weight W_ij goes to the node's own value.
// Stats().neighbor_distance: ||x_i - mean_j x_j|| / ||x_i|| over the accepted
// neighbours' values of the round, before mixing.
//
// With a lossy codec the received x_j are approximations, so the average is no
// longer preserved exactly; use ChocoGossip for compressed gossip.
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

// D-PSGD has only the common settings (gossip_protocol.h).
struct DpsgdOptions : GossipOptions {};

class DpsgdGossip final : public GossipProtocol {
 public:
  // Fails when the graph is neither undirected nor regular, or its node count is not transport.size(),
  // or on bad options.
  static Result<std::unique_ptr<DpsgdGossip>> Create(Transport& transport, topologies::Graph graph,
                                                     const DpsgdOptions& options);

  std::string_view Name() const override { return "d-psgd"; }
  [[nodiscard]] Status Mix(std::span<float> params, int64_t round, Deadline deadline) override;
  [[nodiscard]] Status SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) override;

  // This node's row of W: itself and each neighbour, sorted by peer.
  const std::vector<topologies::PeerWeight>& weights() const { return weights_; }

 private:
  DpsgdGossip(Transport& transport, topologies::Graph graph, const DpsgdOptions& options,
              std::unique_ptr<Codec> codec)
      : GossipProtocol(transport),
        graph_(std::move(graph)),
        options_(options),
        codec_(std::move(codec)) {}
  Status Install(topologies::Graph graph, uint32_t epoch);
  // Mix's steps. Sends the encoded params to `to` and receives from `from`
  // into inboxes_.
  Status ExchangeValues(std::span<const float> params, const std::vector<int>& to,
                        const std::vector<int>& from, int64_t round, Deadline deadline);
  // Decodes inboxes_ into decoded_, marking each neighbour of `from` accepted
  // unless its values are non-finite; returns how many were rejected.
  Result<uint64_t> DecodeNeighbors(const std::vector<int>& from, std::span<const float> params, int64_t round,
                                   std::vector<bool>& accepted);
  // Sets w[k] for each accepted neighbour; returns the self weight.
  double MixingWeights(const std::vector<bool>& accepted, std::vector<double>& w) const;
  // params <- self_weight * params + sum_k w[k] decoded_[k], and records the round.
  void MixInto(std::span<float> params, const std::vector<bool>& accepted, const std::vector<double>& w,
               double self_weight, uint64_t rejected);

  topologies::Graph graph_;
  DpsgdOptions options_;
  std::unique_ptr<Codec> codec_;
  std::vector<topologies::PeerWeight> weights_;
  std::vector<int> neighbors_;  // weights_ without self, in the same order
  bool directed_ = false;       // a regular directed graph: per-round lists, uniform weights
  std::vector<std::byte> send_;
  std::vector<std::vector<std::byte>> inboxes_;
  std::vector<std::vector<float>> decoded_;  // one per neighbour
  std::vector<const float*> mix_rows_;       // the accepted rows of decoded_, for MixWeighted
  std::vector<double> mix_weights_;          // their weights
};

// Checks a graph against the transport for the protocols that need an undirected
// graph (D-PSGD, CHOCO, pairwise); `who` names the protocol in errors.
Status CheckGraph(const topologies::Graph& graph, const Transport& transport, bool need_undirected,
                  std::string_view who);

}  // namespace chorus::gossip
