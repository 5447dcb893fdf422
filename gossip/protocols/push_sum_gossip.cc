// PushSumGossip (gossip_push_sum.h): fold the local step into x, push shares of
// (x, w) along the round's out-edges, sum what arrives, write z = x / w.
#include "gossip/protocols/push_sum_gossip.h"

#include <cmath>
#include <string>

#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/push_sum_wire.h"
#include "topologies/mixing_weights.h"

namespace chorus::gossip {

Result<std::unique_ptr<PushSumGossip>> PushSumGossip::Create(Transport& transport,
                                                             topologies::Graph graph,
                                                             const PushSumOptions& options) {
  CHORUS_RETURN_IF_ERROR(CheckPeriod(options.period, "push-sum"));
  CHORUS_RETURN_IF_ERROR(CheckGraph(graph, transport, false, "push-sum"));
  CHORUS_ASSIGN_OR_RETURN(auto codec, MakeCodec(options.codec));
  return std::unique_ptr<PushSumGossip>(
      new PushSumGossip(transport, std::move(graph), options, std::move(codec)));
}

Status PushSumGossip::SetTopology(topologies::Graph graph, uint32_t epoch,
                                  std::span<float> params) {
  CHORUS_RETURN_IF_ERROR(CheckGraph(graph, transport_, false, Name()));
  graph_ = std::move(graph);
  options_.epoch = epoch;
  x_.assign(params.begin(), params.end());
  w_ = 1.0;
  ResetState(params.size());
  return Status::Ok();
}

Status PushSumGossip::Mix(std::span<float> params, int64_t round, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  if (x_.size() != params.size()) {  // first call: x = params, w = 1
    x_.assign(params.begin(), params.end());
    w_ = 1.0;
  }
  if (SkipRound(round, options_.period)) return Status::Ok();
  const int64_t graph_round = round / options_.period;
  const std::vector<int>& from = graph_.InNeighbors(transport_.rank(), graph_round);
  FoldLocalStep(params);
  CHORUS_ASSIGN_OR_RETURN(const double self_share, ExchangeShares(from, round, graph_round, deadline));
  CHORUS_ASSIGN_OR_RETURN(const ShareSums sums, SumShares(self_share, from, round));
  WriteMixed(params, sums);
  return Status::Ok();
}

// 1. Fold the local step (taken on z = params) into the numerator. z_written is
// bit for bit what step 4 wrote, so without a local step x stays unchanged.
void PushSumGossip::FoldLocalStep(std::span<const float> params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const float z_written = static_cast<float>(static_cast<double>(x_[i]) / w_);
    if (params[i] == z_written) continue;
    x_[i] = static_cast<float>(static_cast<double>(x_[i]) +
                               (static_cast<double>(params[i]) - static_cast<double>(z_written)));
  }
}

// 2. Shares: one message per out-neighbour, [p][w][codec(x)].
Result<double> PushSumGossip::ExchangeShares(const std::vector<int>& from, int64_t round, int64_t graph_round,
                                             Deadline deadline) {
  const Rank self = transport_.rank();
  CHORUS_ASSIGN_OR_RETURN(auto shares, topologies::PushSumWeights(graph_, self, graph_round));
  CHORUS_RETURN_IF_ERROR(codec_->Encode(x_, MessageSeed(options_.seed, self, round), &send_));
  double self_share = 0.0;
  std::vector<int> to;
  std::vector<std::vector<std::byte>> messages;
  for (const auto& pw : shares) {
    if (pw.peer == self) {
      self_share = pw.weight;
      continue;
    }
    to.push_back(pw.peer);
    messages.push_back(EncodePushSumShare(pw.weight, w_, send_));
  }
  std::vector<std::span<const std::byte>> payloads(messages.begin(), messages.end());
  const Tag tag =
      GossipTag(GossipMessageKind::kPushSum, options_.tag_stream, options_.epoch, round);
  Status exchanged = Exchange(to, payloads, from, kPushSumHeaderBytes + codec_->WireBytes(x_.size()), tag,
                              deadline, &inboxes_);
  if (!exchanged.ok()) return Err(Fail(exchanged, round));
  return self_share;
}

// 3. Sum own share and the accepted in-neighbours' shares, in double: the
// numerator into acc_[0, n), the neighbours' z_k (for the estimate) into acc_[n, 2n).
Result<PushSumGossip::ShareSums> PushSumGossip::SumShares(double self_share, const std::vector<int>& from,
                                                           int64_t round) {
  const size_t n = x_.size();
  acc_.resize(2 * n);
  double* acc = acc_.data();
  double* zmean = acc_.data() + n;  // sum of the neighbours' z_k, for the estimate
  for (size_t i = 0; i < n; ++i) {
    acc[i] = self_share * static_cast<double>(x_[i]);
    zmean[i] = 0.0;
  }
  ShareSums sums;
  sums.w = self_share * w_;
  decoded_.resize(n);
  for (size_t k = 0; k < from.size(); ++k) {
    Result<PushSumShare> share = DecodePushSumShare(inboxes_[k]);
    if (!share) {
      return Err(Fail(share.error().WithContext("push-sum: from rank " + std::to_string(from[k])), round));
    }
    const double p = share->share;
    const double w = share->weight;
    Status s = codec_->Decode(share->values, decoded_);
    if (IsNonFiniteRejection(s) || !(std::isfinite(w) && w > 0.0)) {
      ++sums.rejected;
      continue;
    }
    if (!s.ok()) {
      return Err(Fail(s.WithContext("message from rank " + std::to_string(from[k])), round));
    }
    ++sums.accepted;
    sums.w += p * w;
    for (size_t i = 0; i < n; ++i) {
      acc[i] += p * static_cast<double>(decoded_[i]);
      zmean[i] += static_cast<double>(decoded_[i]) / w;
    }
  }
  return sums;
}

// 4. New (x, w) and z = x / w into params; the estimate compares the old z.
void PushSumGossip::WriteMixed(std::span<float> params, const ShareSums& sums) {
  const size_t n = params.size();
  const double* acc = acc_.data();
  const double* zmean = acc_.data() + n;
  double diff2 = 0.0;
  double norm2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double z_old = static_cast<double>(x_[i]) / w_;
    if (sums.accepted > 0) {
      const double d = z_old - zmean[i] / static_cast<double>(sums.accepted);
      diff2 += d * d;
    }
    norm2 += z_old * z_old;
    x_[i] = static_cast<float>(acc[i]);
    params[i] = static_cast<float>(static_cast<double>(x_[i]) / sums.w);
  }
  w_ = sums.w;
  RecordMixRound(diff2, norm2, sums.rejected);
}

}  // namespace chorus::gossip
