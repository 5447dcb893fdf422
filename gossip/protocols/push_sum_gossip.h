// PushSumGossip: push-sum averaging for directed and time-varying graphs
// (Kempe et al. 2003; Stochastic Gradient Push, Assran et al. 2019).
//
// State per node: the biased numerator x_i (n floats, kept by this object) and
// the weight w_i (a double, 1 at the start). At communicating round t (the m-th
// communicating round, m = round / period, picks the graph's round m) node i
//   1. folds the local optimizer step into x: the trainer stepped on params = z_i,
//      so x_i <- x_i + (params - x_i / w_i)      (SGP: x <- x - lr * grad(z)),
//   2. sends (p_j x_i, p_j w_i) to each out-neighbour j, p = PushSumWeights(graph,
//      i, m) (column stochastic: mass is conserved), keeps (p_i x_i, p_i w_i),
//   3. sums what its in-neighbours sent: x_i <- p_i x_i + sum_k p_k x_k and
//      w_i <- p_i w_i + sum_k p_k w_k,
//   4. writes the de-biased z_i = x_i / w_i into params.
// So params always hold z, what the model uses; the biased x and w stay here
// (biased(), weight()). sum_i w_i stays n and sum_i x_i stays the sum of the
// initial vectors (plus local steps), so z_i converges to the average.
//
// Wire: each message is [f64 share p][f64 sender weight w][codec(x)]; the receiver
// adds p * w and p * decode(x). A message whose x decodes to non-finite values, or
// whose weight is not finite and positive, is rejected (counted) and its share of
// mass is lost; z stays de-biased because x and w lose the same share.
// Stats().neighbor_distance: ||z_i - mean_k z_k|| / ||z_i|| over the accepted
// in-neighbours' z_k = x_k / w_k of the round.
//
// SetTopology restarts from x = params, w = 1 (mass in flight at a failure is lost).
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

namespace chorus::gossip {

// Only the common settings (gossip_protocol.h). A lossy codec loses mass
// (push-sum is then not unbiased).
struct PushSumOptions : GossipOptions {};

class PushSumGossip final : public GossipProtocol {
 public:
  // Any graph (directed, time-varying) with transport.size() nodes.
  static Result<std::unique_ptr<PushSumGossip>> Create(Transport& transport,
                                                       topologies::Graph graph,
                                                       const PushSumOptions& options);

  std::string_view Name() const override { return "push-sum"; }
  // The first call (or SetTopology) takes params as the initial x with w = 1.
  [[nodiscard]] Status Mix(std::span<float> params, int64_t round, Deadline deadline) override;
  [[nodiscard]] Status SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) override;

  // The push-sum weight w_i (1 until the first communicating round).
  double weight() const { return w_; }
  // The biased numerator x_i (empty before the first Mix).
  std::span<const float> biased() const { return x_; }

 private:
  PushSumGossip(Transport& transport, topologies::Graph graph, const PushSumOptions& options,
                std::unique_ptr<Codec> codec)
      : GossipProtocol(transport),
        graph_(std::move(graph)),
        options_(options),
        codec_(std::move(codec)) {}

  // What step 3 of Mix summed besides acc_: the new weight, and how many
  // in-neighbours' shares it took and rejected.
  struct ShareSums {
    double w = 0.0;
    size_t accepted = 0;
    uint64_t rejected = 0;
  };
  // Mix's steps, numbered as in the file comment.
  void FoldLocalStep(std::span<const float> params);
  // Sends the shares to the round's out-neighbours and receives those of `from`
  // into inboxes_; returns this node's own share.
  Result<double> ExchangeShares(const std::vector<int>& from, int64_t round, int64_t graph_round,
                                Deadline deadline);
  Result<ShareSums> SumShares(double self_share, const std::vector<int>& from, int64_t round);
  // Writes the new (x, w), z into params, and records the round.
  void WriteMixed(std::span<float> params, const ShareSums& sums);

  topologies::Graph graph_;
  PushSumOptions options_;
  std::unique_ptr<Codec> codec_;
  std::vector<float> x_;
  double w_ = 1.0;
  std::vector<std::byte> send_;
  std::vector<std::vector<std::byte>> inboxes_;
  std::vector<float> decoded_;
  std::vector<double> acc_;
};

}  // namespace chorus::gossip
