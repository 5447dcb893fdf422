// DpsgdGossip (gossip_dpsgd.h): one exchange with every neighbour per
// communicating round, then x_i <- sum_j W_ij x_j.
#include "gossip/protocols/dpsgd_gossip.h"

#include <string>

#include "gossip/protocols/mix_blocks.h"

namespace chorus::gossip {

Status CheckGraph(const topologies::Graph& graph, const Transport& transport, bool need_undirected,
                  std::string_view who) {
  if (graph.NumNodes() != transport.size()) {
    return InvalidArgument(std::string(who) + ": graph " + graph.Name() + " has " +
                           std::to_string(graph.NumNodes()) + " nodes but the transport has " +
                           std::to_string(transport.size()) + " ranks");
  }
  if (need_undirected && !graph.IsUndirected()) {
    return InvalidArgument(std::string(who) + ": graph " + graph.Name() +
                           " is directed or time-varying; use push-sum");
  }
  if (transport.rank() < 0 || transport.rank() >= graph.NumNodes()) {
    return FailedPrecondition(std::string(who) + ": transport rank " +
                              std::to_string(transport.rank()) + " is not a graph node");
  }
  return Status::Ok();
}

Result<std::unique_ptr<DpsgdGossip>> DpsgdGossip::Create(Transport& transport,
                                                         topologies::Graph graph,
                                                         const DpsgdOptions& options) {
  CHORUS_RETURN_IF_ERROR(CheckPeriod(options.period, "d-psgd"));
  CHORUS_ASSIGN_OR_RETURN(auto codec, MakeCodec(options.codec));
  std::unique_ptr<DpsgdGossip> p(new DpsgdGossip(transport, graph, options, std::move(codec)));
  CHORUS_RETURN_IF_ERROR(p->Install(std::move(graph), options.epoch));
  return p;
}

// True when at every round every node has one common in- and out-degree.
bool IsRegular(const topologies::Graph& graph) {
  for (int t = 0; t < graph.Period(); ++t) {
    const int d = graph.OutDegree(0, t);
    for (int i = 0; i < graph.NumNodes(); ++i) {
      if (graph.OutDegree(i, t) != d || graph.InDegree(i, t) != d) return false;
    }
  }
  return true;
}

Status DpsgdGossip::Install(topologies::Graph graph, uint32_t epoch) {
  directed_ = !graph.IsUndirected();
  if (directed_ && !IsRegular(graph)) {
    return InvalidArgument(std::string(Name()) + ": graph " + graph.Name() +
                           " is directed and not regular (in- and out-degrees differ); use push-sum");
  }
  CHORUS_RETURN_IF_ERROR(CheckGraph(graph, transport_, /*need_undirected=*/false, Name()));
  std::vector<topologies::PeerWeight> weights;
  if (!directed_) {
    CHORUS_ASSIGN_OR_RETURN(weights, topologies::MetropolisHastingsWeights(graph, transport_.rank()));
  }
  graph_ = std::move(graph);
  options_.epoch = epoch;
  weights_ = std::move(weights);
  neighbors_.clear();
  for (const auto& pw : weights_) {
    if (pw.peer != transport_.rank()) neighbors_.push_back(pw.peer);
  }
  return Status::Ok();
}

Status DpsgdGossip::SetTopology(topologies::Graph graph, uint32_t epoch, std::span<float> params) {
  CHORUS_RETURN_IF_ERROR(Install(std::move(graph), epoch));
  ResetState(params.size());
  return Status::Ok();
}

Status DpsgdGossip::Mix(std::span<float> params, int64_t round, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  if (SkipRound(round, options_.period)) return Status::Ok();
  const Rank self = transport_.rank();
  // Undirected: the same neighbours both ways, Metropolis-Hastings weights.
  // Regular directed: this round's out- and in-neighbours, uniform weights.
  const std::vector<int>& to = directed_ ? graph_.OutNeighbors(self, round) : neighbors_;
  const std::vector<int>& from = directed_ ? graph_.InNeighbors(self, round) : neighbors_;
  CHORUS_RETURN_IF_ERROR(ExchangeValues(params, to, from, round, deadline));
  std::vector<bool> accepted(from.size(), false);
  CHORUS_ASSIGN_OR_RETURN(const uint64_t rejected, DecodeNeighbors(from, params, round, accepted));
  std::vector<double> w(from.size(), 0.0);
  const double self_weight = MixingWeights(accepted, w);
  MixInto(params, accepted, w, self_weight, rejected);
  return Status::Ok();
}

Status DpsgdGossip::ExchangeValues(std::span<const float> params, const std::vector<int>& to,
                                   const std::vector<int>& from, int64_t round, Deadline deadline) {
  const size_t n = params.size();
  CHORUS_RETURN_IF_ERROR(codec_->Encode(params, MessageSeed(options_.seed, transport_.rank(), round), &send_));
  const Tag tag = GossipTag(GossipMessageKind::kDpsgd, options_.tag_stream, options_.epoch, round);
  if (directed_) {
    const std::vector<std::span<const std::byte>> payloads(to.size(), send_);
    Status exchanged = Exchange(to, payloads, from, codec_->WireBytes(n), tag, deadline, &inboxes_);
    if (!exchanged.ok()) return Fail(exchanged, round);
    return Status::Ok();
  }
  return ExchangeWithNeighbors(neighbors_, send_, codec_->WireBytes(n), tag, deadline, round, &inboxes_);
}

Result<uint64_t> DpsgdGossip::DecodeNeighbors(const std::vector<int>& from, std::span<const float> params,
                                              int64_t round, std::vector<bool>& accepted) {
  const size_t n = params.size();
  // Decode every neighbour; a non-finite one keeps an empty slot.
  decoded_.resize(from.size());
  uint64_t rejected = 0;
  for (size_t k = 0; k < from.size(); ++k) {
    decoded_[k].resize(n);
    Status s = codec_->Decode(inboxes_[k], decoded_[k]);
    if (IsNonFiniteRejection(s)) {
      ++rejected;
      NoteNonFinite(from[k]);
      continue;
    }
    if (!s.ok()) {
      return Err(Fail(s.WithContext("message from rank " + std::to_string(from[k])), round));
    }
    if (options_.max_relative_distance > 0 &&
        RejectOutlier(RelativeDistance(params, decoded_[k]), from[k], options_.max_relative_distance)) {
      continue;
    }
    NoteAccepted(from[k]);
    accepted[k] = true;
  }
  return rejected;
}

double DpsgdGossip::MixingWeights(const std::vector<bool>& accepted, std::vector<double>& w) const {
  // Weights: the self weight absorbs the weights of rejected neighbours.
  const Rank self = transport_.rank();
  double self_weight = 0.0;
  if (directed_) {
    const double uniform = 1.0 / static_cast<double>(accepted.size() + 1);
    self_weight = uniform;
    for (size_t k = 0; k < accepted.size(); ++k) (accepted[k] ? w[k] : self_weight) += uniform;
  }
  for (size_t k = 0, pw = 0; pw < weights_.size(); ++pw) {
    if (weights_[pw].peer == self) {
      self_weight += weights_[pw].weight;
      continue;
    }
    if (accepted[k]) {
      w[k] = weights_[pw].weight;
    } else {
      self_weight += weights_[pw].weight;
    }
    ++k;
  }
  return self_weight;
}

void DpsgdGossip::MixInto(std::span<float> params, const std::vector<bool>& accepted, const std::vector<double>& w,
                          double self_weight, uint64_t rejected) {
  // The mix in double per element, and the neighbour-mean distance estimate.
  mix_rows_.clear();
  mix_weights_.clear();
  for (size_t k = 0; k < accepted.size(); ++k) {
    if (!accepted[k]) continue;
    mix_rows_.push_back(decoded_[k].data());
    mix_weights_.push_back(w[k]);
  }
  const MixSums sums = MixWeighted(params.data(), params.size(), self_weight,
                                   MixRows{mix_rows_.data(), mix_weights_.data(), mix_rows_.size()});
  RecordMixRound(sums.diff2, sums.norm2, rejected);
}

}  // namespace chorus::gossip
