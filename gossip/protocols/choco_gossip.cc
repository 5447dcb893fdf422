// ChocoGossip (choco_gossip.h): compress x - x_hat, exchange, update the public
// copies, then step x towards the neighbours' public copies.
#include "gossip/protocols/choco_gossip.h"

#include <string>

#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/mix_blocks.h"

namespace chorus::gossip {

Result<std::unique_ptr<ChocoGossip>> ChocoGossip::Create(Transport& transport,
                                                         topologies::Graph graph,
                                                         const ChocoOptions& options) {
  CHORUS_RETURN_IF_ERROR(CheckPeriod(options.period, "choco"));
  if (!(options.gamma > 0.0 && options.gamma <= 1.0)) {
    return Err(
        InvalidArgument("choco: gamma must be in (0, 1], got " + std::to_string(options.gamma)));
  }
  CHORUS_ASSIGN_OR_RETURN(auto codec, MakeCodec(options.codec));
  std::unique_ptr<ChocoGossip> p(new ChocoGossip(transport, graph, options, std::move(codec)));
  CHORUS_RETURN_IF_ERROR(p->Install(std::move(graph), options.epoch));
  return p;
}

Status ChocoGossip::Install(topologies::Graph graph, uint32_t epoch) {
  CHORUS_RETURN_IF_ERROR(CheckGraph(graph, transport_, true, Name()));
  CHORUS_ASSIGN_OR_RETURN(auto weights,
                          topologies::MetropolisHastingsWeights(graph, transport_.rank()));
  graph_ = std::move(graph);
  options_.epoch = epoch;
  neighbors_.clear();
  neighbor_weights_.clear();
  for (const auto& pw : weights) {
    if (pw.peer == transport_.rank()) {
      self_weight_ = pw.weight;
    } else {
      neighbors_.push_back(pw.peer);
      neighbor_weights_.push_back(pw.weight);
    }
  }
  hats_.clear();  // re-created as zeros by the next Mix
  return Status::Ok();
}

Status ChocoGossip::SetTopology(topologies::Graph graph, uint32_t epoch, std::span<float> params) {
  CHORUS_RETURN_IF_ERROR(Install(std::move(graph), epoch));
  ResetState(params.size());
  return Status::Ok();
}

Status ChocoGossip::Mix(std::span<float> params, int64_t round, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  if (SkipRound(round, options_.period)) return Status::Ok();
  const Rank self = transport_.rank();
  const size_t n = params.size();
  if (hats_.size() != neighbors_.size() + 1 || hats_[0].size() != n) {
    hats_.assign(neighbors_.size() + 1, std::vector<float>(n, 0.0f));
  }

  // q_i = Q(x_i - x_hat_i), sent to every neighbour.
  diff_.resize(n);
  for (size_t i = 0; i < n; ++i) diff_[i] = params[i] - hats_[0][i];
  CHORUS_RETURN_IF_ERROR(codec_->Encode(diff_, MessageSeed(options_.seed, self, round), &send_));
  const Tag tag = GossipTag(GossipMessageKind::kChoco, options_.tag_stream, options_.epoch, round);
  CHORUS_RETURN_IF_ERROR(ExchangeWithNeighbors(neighbors_, send_, codec_->WireBytes(n), tag,
                                               deadline, round, &inboxes_));

  // x_hat_j += q_j for self (decoded from the bytes sent, like the neighbours do)
  // and each neighbour.
  q_.resize(n);
  uint64_t rejected = 0;
  for (size_t k = 0; k <= neighbors_.size(); ++k) {
    std::span<const std::byte> bytes =
        k == 0 ? std::span<const std::byte>(send_) : std::span<const std::byte>(inboxes_[k - 1]);
    Status s = codec_->Decode(bytes, q_);
    if (IsNonFiniteRejection(s)) {
      ++rejected;
      continue;
    }
    if (!s.ok()) {
      const std::string who =
          k == 0 ? "own message" : "message from rank " + std::to_string(neighbors_[k - 1]);
      return Fail(s.WithContext(who), round);
    }
    std::vector<float>& hat = hats_[k];
    for (size_t i = 0; i < n; ++i) hat[i] += q_[i];
  }

  // x_i += gamma * sum_j W_ij (x_hat_j - x_hat_i), in double per element.
  hat_rows_.clear();
  for (size_t k = 0; k < neighbors_.size(); ++k) hat_rows_.push_back(hats_[k + 1].data());
  const MixSums sums = StepTowards(params.data(), n, hats_[0].data(), options_.gamma,
                                   MixRows{hat_rows_.data(), neighbor_weights_.data(), neighbors_.size()});
  RecordMixRound(sums.diff2, sums.norm2, rejected);
  return Status::Ok();
}

}  // namespace chorus::gossip
