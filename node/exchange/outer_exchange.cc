// Low-communication training: the outer step (see outer_exchange.h).
#include "node/exchange/outer_exchange.h"

#include <algorithm>
#include <numeric>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

#include "common/log.h"
#include "gossip/protocols/consensus.h"
#include "gossip/protocols/gossip_protocol.h"
#include "gossip/protocols/gossip_tags.h"
#include "gossip/protocols/message_round.h"
#include "gossip/protocols/sparse_ring_reduce.h"
#include "node/cluster/step_agreement.h"
#include "node/exchange/allreduce_exchange.h"
#include "node/exchange/batch_norm_state.h"
#include "node/exchange/trainer_state.h"
#include "node/config/config_fields.h"
#include "node/exchange/gossip_exchange.h"
#include "node/exchange/outer_sync_wire.h"

namespace chorus::node {
namespace {

// The names of `ranks` of `view` (by position), for the checks' verdicts;
// "rank N" for a rank the view does not hold.
std::vector<std::string> MemberNames(const MembershipView& view, const std::vector<int>& ranks) {
  std::vector<std::string> names;
  for (int r : ranks) names.push_back(r >= 0 && r < view.size() ? view.members[r].name : "rank " + std::to_string(r));
  return names;
}

// The norm of v / world, and whether v is finite: a contribution in the
// mean's share, as the poison check compares it.
std::pair<double, bool> ShareOfMean(std::span<const float> v, int world) {
  double sumsq = 0;
  bool finite = true;
  for (float f : v) {
    const double d = static_cast<double>(f) / world;
    sumsq += d * d;
    finite = finite && std::isfinite(f);
  }
  return {std::sqrt(sumsq), finite};
}

constexpr const char* kAnchorName = "outer.anchor";
constexpr const char* kVelocityName = "outer.velocity";

// The tags of the sync begun after `step` in membership epoch `epoch`: a
// range of kTagsPerCollective at EpochTagBase + 1 << 37 (live_state.h lists
// every range of EpochTagBase's); at most one sync is in flight, and steps
// 2^17 apart never are.
gossip::Tag SyncTagBase(uint64_t epoch, int64_t step) {
  return EpochTagBase(epoch) + (gossip::Tag{1} << 37) +
         (static_cast<gossip::Tag>(step) % (gossip::Tag{1} << 17)) * gossip::kTagsPerCollective;
}

// The tags of the site average after `step` and of the broadcast inside the
// site of the sync begun after `step`, in membership epoch `epoch`: ranges of
// kTagsPerCollective at EpochTagBase and at EpochTagBase + 1 << 36 (the
// fusion buckets' ranges, unused by an outer exchange; live_state.h lists
// every range of EpochTagBase's). Steps 2^15 apart never overlap.
gossip::Tag SiteAverageTagBase(uint64_t epoch, int64_t step) {
  return EpochTagBase(epoch) + (static_cast<gossip::Tag>(step) % (gossip::Tag{1} << 15)) * gossip::kTagsPerCollective;
}
gossip::Tag SiteBroadcastTagBase(uint64_t epoch, int64_t step) {
  return SiteAverageTagBase(epoch, step) + (gossip::Tag{1} << 36);
}

gossip::OuterKind KindOf(OuterOptimizer optimizer) {
  switch (optimizer) {
    case OuterOptimizer::kAverage: return gossip::OuterKind::kAverage;
    case OuterOptimizer::kSgd: return gossip::OuterKind::kSgd;
    case OuterOptimizer::kNesterov:
    case OuterOptimizer::kNone: break;
  }
  return gossip::OuterKind::kNesterov;
}

// Sends `payload` to every rank of `peers` and receives one message of
// exactly `bytes` from each into `inboxes` (in the order of `peers`). On a
// failure, both are kept for good when the provider did not release one of
// the requests: a peer that froze halfway may still have them read or written.
Status SwapWithPeers(gossip::Transport& transport, std::span<const int> peers, gossip::Tag tag,
                     std::vector<std::byte>* payload, size_t bytes, Deadline deadline,
                     std::vector<std::vector<std::byte>>* inboxes) {
  inboxes->assign(peers.size(), std::vector<std::byte>(bytes));
  return gossip::SwapExactly(transport, peers, *payload, peers, tag, deadline, inboxes, "outer sync");
}

}  // namespace

Result<std::unique_ptr<OuterExchange>> OuterExchange::Create(const Config& config, ClusterSession* session,
                                                             trainer::Trainer* trainer, TraceWriter* trace) {
  std::unique_ptr<OuterExchange> ex(new OuterExchange(config, session, trainer, trace));
  const OuterConfig& oc = config.exchange.outer;
  ex->step_options_ = {KindOf(oc.optimizer), static_cast<float>(oc.lr), static_cast<float>(oc.momentum)};
  if (config.exchange.compression.codec != gossip::CodecKind::kNone) {
    gossip::CodecOptions codec;
    codec.kind = config.exchange.compression.codec;
    codec.ratio = config.exchange.compression.ratio;
    codec.chunk = config.exchange.compression.chunk;
    codec.value_bits = config.exchange.compression.value_bits;
    CHORUS_ASSIGN_OR_RETURN(ex->codec_, gossip::MakeCodec(codec));
  }
  const std::span<const float> master = trainer->MasterWeights();
  ex->anchor_.assign(master.begin(), master.end());
  ex->velocity_.assign(master.size(), 0.0f);
  ex->residual_.assign(master.size(), 0.0f);
  ex->fragments_ = gossip::SplitFragments(master.size(), oc.fragments);
  ex->landed_after_.assign(ex->fragments_.size(), -2);
  CHORUS_RETURN_IF_ERROR(ex->Build());
  return ex;
}

OuterExchange::~OuterExchange() {
  if (in_flight_ && in_flight_->done.valid()) in_flight_->done.wait();
  if (sites_) sites_->KeepUnreleasedBuffers();
}

Status OuterExchange::Build() {
  const MembershipView& view = session_->view;
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective c,
                          gossip::Collective::Create(*session_->transport, HostKeys(view), std::nullopt,
                                                     SiteKeys(view, config_.exchange.link_aware)));
  collective_ = std::make_unique<gossip::Collective>(std::move(c));
  if (sites_) sites_->KeepUnreleasedBuffers();
  sites_.reset();
  if (config_.exchange.outer.inner != OuterInner::kAlone) {
    std::optional<SiteGossipSpec> gossip;
    if (config_.exchange.outer.inner == OuterInner::kSiteGossip) {
      gossip = SiteGossipSpec{GossipTopologySpec(config_), config_.train.seed,
                              config_.exchange.poison_check ? config_.exchange.poison_distance_bound : 0.0};
    }
    CHORUS_ASSIGN_OR_RETURN(SiteLevels levels, SiteLevels::Build(*collective_, view, gossip));
    sites_ = std::move(levels);
  }
  graph_.reset();
  if (config_.exchange.kind == ExchangeKind::kGossip && config_.exchange.outer.peers == OuterPeers::kNeighbours) {
    CHORUS_ASSIGN_OR_RETURN(topologies::Graph flat, GossipGraph(config_, view.size()));
    CHORUS_ASSIGN_OR_RETURN(topologies::Graph graph, PlacedBySite(std::move(flat), view, config_.exchange.link_aware));
    if (!graph.IsUndirected()) {
      return InvalidArgument("topology " + std::string(topologies::GraphKindName(config_.topology.kind)) +
                             " is directed; an outer step with the neighbours needs an undirected graph");
    }
    graph_ = std::move(graph);
  }
  return Status::Ok();
}

std::string OuterExchange::Describe() const {
  const OuterConfig& oc = config_.exchange.outer;
  std::string peers = config_.exchange.kind == ExchangeKind::kAllreduce
                          ? "all-reduce " + std::string(gossip::AllreduceAlgorithmName(config_.exchange.algorithm))
                          : (oc.peers == OuterPeers::kRandom
                                 ? std::string("one random peer")
                                 : std::string(topologies::GraphKindName(config_.topology.kind)) + " neighbours");
  std::string text = "outer " + std::string(SettingName(oc.optimizer)) + " (lr " + FormatDouble(oc.lr) +
                     ", momentum " + FormatDouble(oc.momentum) + ") every " + std::to_string(oc.period) +
                     " steps over " + peers + ", " + std::to_string(session_->view.size()) + " nodes";
  if (oc.fragments > 1 || oc.delay > 0) {
    text += ", " + std::to_string(oc.fragments) + " fragments landing " + std::to_string(oc.delay) + " steps late";
  }
  if (codec_) text += ", pseudo-gradients " + codec_->Describe() + " with error feedback";
  if (sites_) {
    text += std::string("; inside each site ") +
            (sites_->gossips() ? std::string(topologies::GraphKindName(config_.topology.kind)) +
                                     " gossip every step and an all-reduce average at each sync"
                               : std::string("an all-reduce average every step")) +
            ", across " + sites_->Describe() + " by " +
            (oc.site_representatives ? "one representative per site" : "every node");
  }
  return text + " (" + session_->transport->Describe() + ")";
}

std::vector<int> OuterExchange::GroupOf(int64_t step) const {
  const int world = collective_->size(), self = collective_->rank();
  if (config_.exchange.kind == ExchangeKind::kAllreduce) {
    std::vector<int> all(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
    return all;
  }
  if (!graph_) return gossip::RandomGroup(world, self, config_.train.seed, step);
  std::vector<int> group = graph_->OutNeighbors(self, step / std::max(1, config_.exchange.outer.period));
  group.push_back(self);
  std::sort(group.begin(), group.end());
  group.erase(std::unique(group.begin(), group.end()), group.end());
  return group;
}

gossip::AllreduceOptions OuterExchange::AllreduceOptionsAt(gossip::Tag tag_base, Deadline deadline) const {
  gossip::AllreduceOptions o;
  o.algorithm = config_.exchange.algorithm;
  o.crossovers = CrossoversFromConfig(config_.fabric.provider, config_.exchange.crossovers);
  o.tag_base = tag_base;
  o.deadline = deadline;
  return o;
}

// Gossip inside the site, or its exact average: at every step with
// "site", and with "site-gossip" at the steps whose outer sync is due (and
// before the last, Finish), so that the site's replicas are equal where the
// level across sites reads them.
Status OuterExchange::InsideSite(int64_t step) {
  const OuterConfig& oc = config_.exchange.outer;
  const bool sync_due = gossip::FragmentDue(step + 1, oc.fragments, oc.period) >= 0;
  const Deadline deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s);
  const gossip::Tag tag_base = SiteAverageTagBase(session_->view.epoch, step);
  Status s;
  if (sites_->gossips() && !sync_due) {
    s = sites_->MixInSite(trainer_->MasterWeights(), step, deadline);
  } else {
    Result<StepCheck> check = site_check_.Average(*sites_, trainer_->MasterWeights(),
                                                  AllreduceOptionsAt(tag_base, deadline), session_->view.epoch, step,
                                                  SiteSharesNow().in_site, session_->part_signer.get());
    if (check) ReportSiteCheck(*check, step);
    s = check ? Status::Ok() : check.error();
  }
  if (s.ok()) {
    trainer_->RefreshWorkingCopy();
    return s;
  }
  if (in_flight_ && in_flight_->done.valid()) in_flight_->done.wait();  // over the ended epoch: dropped
  in_flight_.reset();
  return Failed(s, "step " + std::to_string(step) + ": exchange inside the site", step + 1);
}

void OuterExchange::ReportSiteCheck(const StepCheck& check, int64_t step) {
  if (check.figures.reports.empty()) return;  // nothing checked
  const std::vector<std::string> names = MemberNames(session_->view, sites_->site_ranks());
  const int self = sites_->site() != nullptr ? sites_->site()->rank() : -1;
  const std::vector<std::string> expel =
      site_poison_.Record(check.verdict, names, check.audited, check.figures.agreed);
  ReportVerdict(check.verdict, expel, names, self, step, "site average after step",
                config_.exchange.poison_expel_after, session_->control.get());
}

Status OuterExchange::AfterUpdate(int64_t step) {
  last_step_ = step;
  if (sites_) {
    const uint64_t epoch = session_->view.epoch;
    CHORUS_RETURN_IF_ERROR(InsideSite(step));
    // A re-form: the others met the loss in this step's sync or site average
    // and dropped the sync due after it; so does this node.
    if (session_->view.epoch != epoch) return Status::Ok();
  }
  if (in_flight_ && in_flight_->land_step <= step) CHORUS_RETURN_IF_ERROR(Land());
  const OuterConfig& oc = config_.exchange.outer;
  const int fragment = gossip::FragmentDue(step + 1, oc.fragments, oc.period);
  if (fragment >= 0) CHORUS_RETURN_IF_ERROR(Begin(fragment, step));
  return Status::Ok();
}

Status OuterExchange::Begin(int fragment, int64_t step) {
  if (in_flight_) CHORUS_RETURN_IF_ERROR(Land());  // the config keeps one in flight; a re-form's skip may not
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(fragment)];
  const std::span<const float> master = trainer_->MasterWeights();
  OuterSync& sync = in_flight_.emplace();
  sync.fragment = fragment;
  sync.step = step;
  sync.land_step = step + config_.exchange.outer.delay;
  sync.weight = SampleWeight();
  sync.params.assign(master.begin() + static_cast<std::ptrdiff_t>(range.begin),
                     master.begin() + static_cast<std::ptrdiff_t>(range.begin + range.count));
  if (poison_fault_ && step >= poison_fault_->from_step) {  // fault injection: a poisoned pseudo-gradient
    for (size_t i = 0; i < range.count; ++i) {
      const float anchor = anchor_[range.begin + i];
      sync.params[i] = anchor - poison_fault_->Apply(anchor - sync.params[i]);
    }
  }
  sync.base.resize(range.count);
  if (sync.land_step == step || virtual_time_) {
    sync.status = Communicate(sync);
    return sync.land_step == step ? Land() : Status::Ok();
  }
  sync.done = std::async(std::launch::async, [this, &sync] { return Communicate(sync); });
  return Status::Ok();
}

Status OuterExchange::Communicate(OuterSync& sync) {
  sync.begin_us = NowMicros();
  sync.audit = {};  // a failed attempt's (a re-form may run the sync again)
  sync.sent.reset();
  sync.received_nonfinite = false;
  const Deadline deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s);
  const gossip::Tag tag_base = SyncTagBase(session_->view.epoch, sync.step);
  Status s = config_.exchange.kind == ExchangeKind::kAllreduce ? AverageOverAll(sync, tag_base, deadline)
                                                               : AverageOverGroup(sync, tag_base, deadline);
  if (s.ok() && config_.exchange.kind == ExchangeKind::kAllreduce && config_.exchange.poison_check &&
      collective_->size() >= 3) {
    s = CheckContributions(sync);
  }
  sync.end_us = NowMicros();
  return s;
}

// Without a codec the base is the all-reduce mean of the parameters (equal
// outer parameters make it the mean pseudo-gradient exactly). With one, the
// compressed pseudo-gradients are summed along a ring that compresses each
// partial sum again (sparse_ring_reduce.h): bytes per node that do not grow
// with the node count, the same decoded sum on every node, and what each
// compression dropped kept in the residual of the node that dropped it.
// Audited (the rest of an epoch in which a member misreported its own), the
// pseudo-gradients are summed whole over every member instead, with neither
// the codec nor the site representatives between a member and the check.
Status OuterExchange::AverageOverAll(OuterSync& sync, gossip::Tag tag_base, Deadline deadline) {
  const int world = collective_->size();
  if (config_.exchange.poison_check && world >= 3 && audit_.On(session_->view.epoch)) {
    return AuditedAverage(sync, tag_base, deadline);
  }
  if (!codec_) {
    std::copy(sync.params.begin(), sync.params.end(), sync.base.begin());
    gossip::AllreduceOptions o = AllreduceOptionsAt(tag_base, deadline);
    if (sites_ && config_.exchange.outer.site_representatives) {
      return sites_->AverageAcrossSites(std::span<float>(sync.base), o,
                                        SiteBroadcastTagBase(session_->view.epoch, sync.step),
                                        SiteSharesNow().across);
    }
    o.pre_scale = static_cast<float>(sync.weight);
    o.post_scale = 1.0f / static_cast<float>(world);
    return collective_->Allreduce(std::span<float>(sync.base), o);
  }
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(sync.fragment)];
  const std::span<const float> anchor(anchor_.data() + range.begin, range.count);
  const std::span<float> residual(residual_.data() + range.begin, range.count);
  std::vector<float> x(range.count), sum(range.count);
  for (size_t i = 0; i < range.count; ++i) {
    x[i] = static_cast<float>(sync.weight * (anchor[i] - sync.params[i])) + residual[i];
  }
  // A non-finite vector cannot be encoded (a codec's scale would be
  // non-finite), and failing here would leave the others waiting on the
  // ring: this member puts nothing in and reports what it had, so that the
  // check names it and no member applies the sync.
  const bool finite = std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
  if (!finite) {
    sync.sent = ShareOfMean(x, world);
    std::fill(x.begin(), x.end(), 0.0f);
  }
  std::function<void(std::span<float>)> alter;  // fault injection: a member that alters what it forwards
  if (poison_fault_ && poison_fault_->forward && sync.step >= poison_fault_->from_step) {
    alter = [f = poison_fault_->factor](std::span<float> v) {
      for (float& e : v) e *= f;
    };
  }
  gossip::SparseRingStats ring;
  CHORUS_RETURN_IF_ERROR(gossip::SparseRingAllreduce(*session_->transport, *codec_, x, residual, sum, tag_base,
                                                     gossip::MessageSeed(config_.train.seed, 0, sync.step),
                                                     deadline, &ring, alter));
  if (ring.nonfinite_received > 0) {
    // Only a member that bypassed its own check sends them: the members'
    // views of the mean then disagree, which abandons the sync.
    CHORUS_LOG_WARN(Subsys::kGossip, "outer sync after step ", sync.step, ": ", ring.nonfinite_received,
                    " message(s) of the sparse ring from rank ", (collective_->rank() + world - 1) % world,
                    " held non-finite values: taken as zeros");
    sync.received_nonfinite = true;
  }
  if (finite) {
    // What this member put into the sum: its vector less what its encodings
    // dropped (the sum over the members is exactly the decoded sum).
    for (size_t i = 0; i < range.count; ++i) x[i] -= residual[i];
    sync.sent = ShareOfMean(x, world);
  }
  for (size_t i = 0; i < range.count; ++i) {
    sync.base[i] = anchor[i] - static_cast<float>(sum[i] / static_cast<float>(world));
  }
  return Status::Ok();
}

Status OuterExchange::AuditedAverage(OuterSync& sync, gossip::Tag tag_base, Deadline deadline) {
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(sync.fragment)];
  const std::span<const float> anchor(anchor_.data() + range.begin, range.count);
  const std::span<float> residual(residual_.data() + range.begin, range.count);
  for (size_t i = 0; i < range.count; ++i) {
    sync.base[i] = static_cast<float>(sync.weight * (anchor[i] - sync.params[i])) + (codec_ ? residual[i] : 0.0f);
  }
  const int world = collective_->size();
  if (codec_) sync.sent = ShareOfMean(sync.base, world);  // the residual goes too: nothing is dropped
  gossip::AllreduceOptions o = AllreduceOptionsAt(tag_base, deadline);
  o.pre_scale = 1.0f / static_cast<float>(world);
  CHORUS_RETURN_IF_ERROR(collective_->AuditedAllreduce(std::span<float>(sync.base), o, &sync.audit));
  for (size_t i = 0; i < range.count; ++i) sync.base[i] = anchor[i] - sync.base[i];
  if (codec_) std::fill(residual.begin(), residual.end(), 0.0f);
  return Status::Ok();
}

Status OuterExchange::CheckContributions(OuterSync& sync) {
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(sync.fragment)];
  const int world = collective_->size();
  // This member's contribution, in the mean's share (weight / world): its
  // pseudo-gradient unless AverageOverAll said otherwise; and the mean's.
  double sumsq = 0, reduced_sumsq = 0;
  bool finite = true, reduced_finite = true;
  for (size_t i = 0; i < range.count; ++i) {
    const float anchor = anchor_[range.begin + i];
    const double mine = sync.weight * (static_cast<double>(anchor) - sync.params[i]) / world;
    const double mean = static_cast<double>(anchor) - sync.base[i];
    sumsq += mine * mine;
    reduced_sumsq += mean * mean;
    finite = finite && std::isfinite(mine);
    reduced_finite = reduced_finite && std::isfinite(mean);
  }
  gossip::StepContribution mine{std::sqrt(sumsq), finite, std::sqrt(reduced_sumsq), reduced_finite};
  if (sync.sent) std::tie(mine.norm, mine.finite) = *sync.sent;
  if (sync.received_nonfinite) mine.reduced_finite = false;
  const MembershipView& view = session_->view;
  gossip::AuditFigures audit = sync.audit;
  const bool faulty = poison_fault_ && sync.step >= poison_fault_->from_step;  // fault injection
  if (faulty && poison_fault_->lie) poison_fault_->Misreport(view.self_rank, &mine, &audit);
  CheckRules rules = CheckRulesFrom(config_);
  rules.signer = session_->part_signer.get();
  rules.equivocate = faulty && poison_fault_->EquivocatesNow();
  // Every path's sum is the sum of what the members report they put in
  // (with a codec, exactly: what each kept), so it is held to the reports.
  CHORUS_ASSIGN_OR_RETURN(StepCheck check,
                          CheckStep(*collective_, view.epoch, CheckedSum::kPseudoGradients, mine, sync.weight,
                                    audit, rules, Deadline::AfterSeconds(config_.fabric.op_timeout_s)));
  std::vector<int> ranks(static_cast<size_t>(world));
  std::iota(ranks.begin(), ranks.end(), 0);
  const std::vector<std::string> names = MemberNames(view, ranks);
  AbandonUnlessLandable(check, "the mean pseudo-gradient");
  const PoisonVerdict& verdict = check.verdict;
  const std::vector<std::string> expel = poison_.Record(verdict, names, check.audited, check.figures.agreed);
  ReportVerdict(verdict, expel, names, view.self_rank, sync.step, "outer sync after step",
                config_.exchange.poison_expel_after, session_->control.get());
  (void)audit_.Note(verdict, view.epoch, "the outer sync after step " + std::to_string(sync.step),
                    "outer syncs are");
  if (verdict.abandon) std::copy_n(anchor_.begin() + static_cast<std::ptrdiff_t>(range.begin), range.count, sync.base.begin());
  return Status::Ok();
}

// With the group's members: the parameters (base = their mean), or with a
// codec the outer parameters and the compressed pseudo-gradient (base = the
// mean outer parameters minus the mean pseudo-gradient). Sums run in rank
// order, so the members of a group compute the same base.
Status OuterExchange::AverageOverGroup(OuterSync& sync, gossip::Tag tag_base, Deadline deadline) {
  const int self = collective_->rank();
  const std::vector<int> group = GroupOf(sync.step);
  std::vector<int> peers;
  for (int r : group) {
    if (r != self) peers.push_back(r);
  }
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(sync.fragment)];
  const size_t n = range.count;
  const std::span<const float> anchor(anchor_.data() + range.begin, n);
  std::vector<std::byte> payload;
  std::vector<float> own(n), other(n);
  if (!codec_) {
    payload = EncodeOuterSyncMessage(std::span<const float>(sync.params).first(n), {});
  } else {
    std::vector<float> delta(n);
    for (size_t i = 0; i < n; ++i) delta[i] = anchor[i] - sync.params[i];
    std::vector<std::byte> wire;
    CHORUS_RETURN_IF_ERROR(gossip::EncodeWithFeedback(*codec_, delta,
                                                      gossip::MessageSeed(config_.train.seed, self, sync.step),
                                                      std::span<float>(residual_.data() + range.begin, n), own,
                                                      &wire));
    payload = EncodeOuterSyncMessage(anchor, wire);
  }
  const size_t bytes = payload.size();
  std::vector<std::vector<std::byte>> inboxes;
  CHORUS_RETURN_IF_ERROR(SwapWithPeers(*session_->transport, peers, tag_base, &payload, bytes, deadline, &inboxes));
  std::vector<double> params_sum(n, 0.0), delta_sum(n, 0.0);
  for (size_t g = 0, k = 0; g < group.size(); ++g) {
    const bool mine = group[g] == self;
    // Parameters, or outer parameters, then the pseudo-gradient.
    CHORUS_ASSIGN_OR_RETURN(const std::span<const std::byte> gradient,
                            ReadOuterSyncMessage(mine ? payload : inboxes[k++], other));
    for (size_t i = 0; i < n; ++i) params_sum[i] += other[i];
    if (codec_) {
      std::span<const float> decoded = own;
      if (!mine) {
        CHORUS_RETURN_IF_ERROR(
            codec_->Decode(gradient, other)
                .WithContext("outer sync: rank " + std::to_string(group[g]) + "'s pseudo-gradient"));
        decoded = other;
      }
      for (size_t i = 0; i < n; ++i) delta_sum[i] += decoded[i];
    }
  }
  const double size = static_cast<double>(group.size());
  for (size_t i = 0; i < n; ++i) sync.base[i] = static_cast<float>((params_sum[i] - delta_sum[i]) / size);
  return Status::Ok();
}

Status OuterExchange::Land() {
  OuterSync& sync = *in_flight_;
  if (sync.done.valid()) {
    const int64_t wait_from = NowMicros();
    sync.status = sync.done.get();
    waited_seconds_ += static_cast<double>(NowMicros() - wait_from) * 1e-6;
    overlapped_seconds_ += static_cast<double>(std::max<int64_t>(0, std::min(wait_from, sync.end_us) - sync.begin_us)) * 1e-6;
  }
  if (trace_) {
    trace_->Add("outer sync " + std::to_string(sync.fragment), 1, sync.begin_us, sync.end_us, sync.step);
  }
  const Status status = std::move(sync.status);
  if (!status.ok()) {
    const std::string what =
        "step " + std::to_string(sync.step) + ": outer sync of fragment " + std::to_string(sync.fragment);
    failed_ = std::move(in_flight_);
    in_flight_.reset();
    const Status s = Failed(status, what, last_step_ + 1);
    failed_.reset();
    return s;
  }
  ApplyOuterUpdate(sync);
  in_flight_.reset();
  return Status::Ok();
}

void OuterExchange::ApplyOuterUpdate(const OuterSync& sync) {
  const gossip::FragmentRange range = fragments_[static_cast<size_t>(sync.fragment)];
  const std::span<float> anchor(anchor_.data() + range.begin, range.count);
  gossip::OuterUpdate(step_options_, sync.base, anchor,
                      std::span<float>(velocity_.data() + range.begin, range.count));
  const std::span<float> master = trainer_->MasterWeights();
  gossip::LandOuterUpdate(static_cast<float>(config_.exchange.outer.local_mix), anchor,
                          master.subspan(range.begin, range.count));
  trainer_->RefreshWorkingCopy();
  landed_after_[static_cast<size_t>(sync.fragment)] = last_step_;
  ++outer_steps_;
}

// Each member's failed sync (step + 1 and fragment + 1; 0 and 0 for none, or
// for one that cannot run again) gathered by a sum in which each member fills
// its own pair. Steps are exact in a float below 2^24 (AgreeOnResumeStep's
// bound); a run past that retries no sync.
Result<bool> OuterExchange::SameSyncFailedEverywhere(const MembershipView& view) {
  const bool can = failed_.has_value() && !codec_ && config_.exchange.kind == ExchangeKind::kAllreduce &&
                   failed_->step + 1 < (int64_t{1} << 24);
  const std::array<float, 2> mine = {can ? static_cast<float>(failed_->step + 1) : 0.0f,
                                     can ? static_cast<float>(failed_->fragment + 1) : 0.0f};
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> ids,
                          GatherFromEveryRank(*collective_, mine,
                                              ResyncTagBase(view.epoch) + 6 * gossip::kTagsPerCollective,
                                              ReformDeadline(config_)));
  if (!can) return false;
  for (int r = 0; r < view.size(); ++r) {
    if (ids[static_cast<size_t>(2 * r)] != mine[0] || ids[static_cast<size_t>(2 * r + 1)] != mine[1]) return false;
  }
  return true;
}

Status OuterExchange::Finish() {
  if (in_flight_) CHORUS_RETURN_IF_ERROR(Land());
  const MembershipView& view = session_->view;
  if (view.size() < 2) return Status::Ok();
  const Deadline deadline = ReformDeadline(config_);
  // Equal already: every member took the same outer parameters at the last step.
  const bool equal = config_.exchange.kind == ExchangeKind::kAllreduce && config_.exchange.outer.local_mix == 0.0 &&
                     std::all_of(landed_after_.begin(), landed_after_.end(),
                                 [&](int64_t s) { return s == last_step_; });
  std::span<float> params = trainer_->MasterWeights();
  if (!equal && sites_ && config_.exchange.outer.site_representatives) {
    // Equal inside each site (averaged after the last step, or now after
    // gossip): across sites by the representatives.
    const gossip::AllreduceOptions o =
        AllreduceOptionsAt(FinishTagBase(view.epoch) + 2 * gossip::kTagsPerCollective, deadline);
    const SiteShares shares = SiteSharesNow();
    if (sites_->gossips()) {
      CHORUS_RETURN_IF_ERROR(sites_->AverageInSite(
          params, AllreduceOptionsAt(FinishTagBase(view.epoch) + 4 * gossip::kTagsPerCollective, deadline),
          shares.in_site));
    }
    CHORUS_RETURN_IF_ERROR(
        sites_->AverageAcrossSites(params, o, FinishTagBase(view.epoch) + 3 * gossip::kTagsPerCollective,
                                   shares.across));
    CHORUS_LOG_INFO(Subsys::kGossip, "outer: replicas averaged across ", sites_->sites(),
                    " sites by their representatives");
  } else if (!equal) {
    gossip::ConsensusOptions o;
    o.method = gossip::ConsensusMethod::kAllreduceAverage;
    o.epoch = static_cast<uint32_t>(view.epoch);
    o.deadline = deadline;
    CHORUS_ASSIGN_OR_RETURN(gossip::ConsensusReport report, gossip::RunConsensus(*collective_, nullptr, params, o));
    consensus_before_ = report.distance_before;
    CHORUS_LOG_INFO(Subsys::kGossip, "outer: replicas averaged (relative distance ", report.distance_before,
                    " -> ", report.distance_after, "), checksum ", report.checksum);
  }
  trainer_->RefreshWorkingCopy();
  return AverageBatchNormState(*collective_, *trainer_, FinishTagBase(view.epoch) + gossip::kTagsPerCollective,
                               deadline);
}

Result<double> OuterExchange::ExactConsensusDistance(int64_t step) {
  if (!evaluations_in_lockstep_ || session_->view.size() < 2) return kNotMeasured;
  return meter_.Measure(*session_, collective_.get(), trainer_->MasterWeights(), step, config_.fabric.op_timeout_s,
                        trace_, kNotMeasured);
}

Status OuterExchange::MembersLost(int64_t next_step) {
  const uint64_t epoch = session_->view.epoch;
  if (in_flight_) CHORUS_RETURN_IF_ERROR(Land());
  if (session_->view.epoch != epoch) return Status::Ok();  // the sync in flight met the loss and re-formed
  return Failed(Unavailable("members of epoch " + std::to_string(epoch) + " left (control plane)"),
                "admission point before step " + std::to_string(next_step), next_step);
}

void OuterExchange::SetMemberShares(const std::vector<int>& shares) {
  shares_ = {shares, session_->view.epoch};
}

double OuterExchange::SampleWeight() const {
  const MembershipView& view = session_->view;
  const std::vector<int>* shares = shares_.For(view);
  // By representatives, a site's weight is SiteShares::across instead.
  const bool by_sites = sites_ && config_.exchange.outer.site_representatives;
  if (by_sites || shares == nullptr || view.self_rank < 0) return 1.0;
  // Equal shares weigh exactly 1 (no rounding, the sums unchanged bit for bit).
  if (std::adjacent_find(shares->begin(), shares->end(), std::not_equal_to<>()) == shares->end()) return 1.0;
  return SampleWeightOf(*shares, (*shares)[static_cast<size_t>(view.self_rank)]);
}

SiteShares OuterExchange::SiteSharesNow() const { return sites_->SharesFrom(shares_.For(session_->view)); }

Result<std::vector<double>> OuterExchange::GatherFromMembers(double mine) {
  // The training loop gathers where no sync is in flight (BalanceDue); one
  // that is would share the collective with the gather, so it lands first,
  // at the same step on every member.
  if (in_flight_) {
    const uint64_t epoch = session_->view.epoch;
    CHORUS_RETURN_IF_ERROR(Land());
    if (session_->view.epoch != epoch) return std::vector<double>();  // re-formed: the shares are cut again
  }
  Result<std::vector<double>> values = GatherMemberValues(*collective_, session_->view.epoch, mine,
                                                          Deadline::AfterSeconds(config_.fabric.op_timeout_s));
  if (!values) {
    CHORUS_RETURN_IF_ERROR(Failed(values.error(), "gathering values from the members", last_step_ + 1));
    return std::vector<double>();
  }
  return values;
}

Status OuterExchange::Failed(const Status& failure, const std::string& what, int64_t next_step) {
  return StopOrReform(config_, failure, what, [&] { return Reform(failure, next_step); });
}

Status OuterExchange::Reform(const Status& failure, int64_t next_step) {
  Status s = ReformOverSurvivors(*session_, config_, failure, "outer", [&](const MembershipView& next) -> Status {
    CHORUS_ASSIGN_OR_RETURN(int64_t step, InstallAndShare(next, next_step));
    CHORUS_ASSIGN_OR_RETURN(const bool again, SameSyncFailedEverywhere(next));
    if (!again) return Resynchronize(next, step);
    // One try: a failure of it re-forms again, and then the survivors take
    // rank 0's state.
    OuterSync sync = std::move(*failed_);
    failed_.reset();
    // The weights were the old membership's; over the survivors they would
    // not sum to their count (and the shares of `next` come later: 1 each).
    sync.weight = SampleWeight();
    CHORUS_RETURN_IF_ERROR(Communicate(sync));
    ApplyOuterUpdate(sync);
    ++syncs_retried_;
    CHORUS_LOG_WARN(Subsys::kGossip, "outer: the sync of fragment ", sync.fragment, " (after step ", sync.step,
                    ") ran again over the ", next.size(), " survivors and landed: every survivor's inner steps count");
    CHORUS_ASSIGN_OR_RETURN(steps_to_catch_up_, StepsBehind(*collective_, next, step, config_));
    return Status::Ok();
  });
  if (s.ok()) ++reforms_;
  return s;
}

Result<int64_t> OuterExchange::InstallAndShare(const MembershipView& next, int64_t next_step) {
  CHORUS_RETURN_IF_ERROR(session_->InstallPeers(next, ReformDeadline(config_)));
  CHORUS_RETURN_IF_ERROR(Build());
  return ShareLiveStateIfAny(*collective_, next, live_, next_step, ReformDeadline(config_));
}

Status OuterExchange::Admit(const MembershipView& next, int64_t next_step) {
  const uint64_t epoch_before = session_->view.epoch;
  if (in_flight_) CHORUS_RETURN_IF_ERROR(Land());  // every member, at the same step
  // A landing that failed re-formed over the survivors: `next` is older than
  // the membership installed now and must not be installed over it; the
  // joiners take the live state of a later epoch (Joined).
  if (session_->view.epoch != epoch_before) return Status::Ok();
  Result<int64_t> admitted = InstallAndShare(next, next_step);
  if (admitted) {
    ++admissions_;
    return Status::Ok();
  }
  return Failed(admitted.error(), "admitting at epoch " + std::to_string(next.epoch), next_step);
}

Status OuterExchange::Joined() {
  const int64_t next_step = live_ != nullptr ? live_->NextStep() : 0;
  Result<int64_t> shared = ShareLiveStateIfAny(*collective_, session_->view, live_, next_step, ReformDeadline(config_));
  if (shared) return Status::Ok();
  return Failed(shared.error(), "taking the live state at epoch " + std::to_string(session_->view.epoch), next_step);
}

Status OuterExchange::Resumed(int64_t next_step) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t skip, CatchUpOnResume(*collective_, session_->view, live_, next_step, config_));
  CHORUS_RETURN_IF_ERROR(BroadcastTrainerState(*collective_, *trainer_, {std::span(anchor_), std::span(velocity_)},
                                               ResyncTagBase(session_->view.epoch), ReformDeadline(config_)));
  steps_to_catch_up_ = skip;
  return Status::Ok();
}

Status OuterExchange::Resynchronize(const MembershipView& view, int64_t next_step) {
  CHORUS_RETURN_IF_ERROR(BroadcastTrainerState(*collective_, *trainer_, {std::span(anchor_), std::span(velocity_)},
                                               ResyncTagBase(view.epoch), ReformDeadline(config_)));
  CHORUS_ASSIGN_OR_RETURN(steps_to_catch_up_, StepsBehind(*collective_, view, next_step, config_));
  return Status::Ok();
}

std::map<std::string, std::vector<float>> OuterExchange::SavedState() const {
  return {{kAnchorName, anchor_}, {kVelocityName, velocity_}};
}

Status OuterExchange::RestoreSavedState(const std::map<std::string, std::vector<float>>& state) {
  const auto anchor = state.find(kAnchorName), velocity = state.find(kVelocityName);
  if (anchor == state.end() || velocity == state.end()) {
    // Not an outer run's state: start afresh from the parameters restored.
    const std::span<const float> master = trainer_->MasterWeights();
    anchor_.assign(master.begin(), master.end());
    std::fill(velocity_.begin(), velocity_.end(), 0.0f);
    return Status::Ok();
  }
  for (const auto& it : {anchor, velocity}) {
    if (it->second.size() != anchor_.size()) {
      return InvalidArgument("exchange state '" + it->first + "' has " + std::to_string(it->second.size()) +
                             " values; the model has " + std::to_string(anchor_.size()) + " parameters");
    }
  }
  anchor_ = anchor->second;
  velocity_ = velocity->second;
  return Status::Ok();
}

nlohmann::json OuterExchange::Metrics() const {
  nlohmann::json m = meter_.cost().TrainingBytes(session_->transport->Stats());
  m.update({{"membership_epoch", session_->view.epoch},
             {"world_size", session_->view.size()},
             {"reforms", reforms_},
             {"admissions", admissions_},
             {"outer_syncs_retried", syncs_retried_},
             {"outer_steps", outer_steps_},
             {"sites", sites_ ? sites_->Metrics() : nlohmann::json(nullptr)},
             {"outer_overlap_seconds", overlapped_seconds_},
             {"outer_wait_seconds", waited_seconds_},
             {"poison", poison_.Summary()}});
  if (config_.exchange.outer.inner != OuterInner::kAlone) m["site_poison"] = site_poison_.Summary();
  meter_.cost().AddMetrics(m);
  if (consensus_before_ >= 0) m["consensus_distance_before"] = consensus_before_;
  return m;
}

}  // namespace chorus::node
