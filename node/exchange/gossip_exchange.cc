// Gossip exchange (see gossip_exchange.h).
#include "node/exchange/gossip_exchange.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "common/checksum.h"
#include "common/log.h"
#include "gossip/protocols/choco_gossip.h"
#include "gossip/codecs/codec.h"
#include "gossip/protocols/consensus.h"
#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/gossip_tags.h"
#include "gossip/protocols/pairwise_gossip.h"
#include "gossip/protocols/push_sum_gossip.h"
#include "node/exchange/allreduce_exchange.h"
#include "node/cluster/step_agreement.h"
#include "node/exchange/batch_norm_state.h"
#include "topologies/graph_builders.h"
#include "topologies/host_groups.h"
#include "topologies/spectral_gap.h"
#include "topologies/topology_spec.h"

namespace chorus::node {
namespace {

// Sets the fields every protocol's options share (gossip::GossipOptions).
template <typename Options>
Options CommonOptions(const gossip::CodecOptions& codec, int period, uint32_t epoch, uint64_t seed,
                      double max_relative_distance) {
  Options o;
  gossip::GossipOptions& common = o;
  common.max_relative_distance = max_relative_distance;
  common.codec = codec;
  common.period = period;
  common.epoch = epoch;
  common.seed = seed;
  return o;
}

// The corrections `config` asks for, with the optimizer's momentum.
GossipCorrections::Options CorrectionOptions(const Config& config, const trainer::Trainer& trainer) {
  GossipCorrections::Options o;
  o.quasi_global_momentum = config.exchange.gossip_momentum == GossipMomentum::kQuasiGlobal;
  o.d2 = config.exchange.correction == GossipCorrection::kD2;
  o.momentum = trainer.optimizer().options().momentum;
  o.momentum_holds_lr = trainer.optimizer().options().kind == trainer::OptimizerKind::kLars;
  return o;
}

// ", quasi-global momentum, d2, an exact average every 50 steps, ...": what
// the step adds to the protocol, for Describe.
std::string CorrectionsDescription(const ExchangeConfig& e) {
  std::string out;
  if (e.gossip_momentum == GossipMomentum::kQuasiGlobal) out += ", quasi-global momentum";
  if (e.correction == GossipCorrection::kD2) out += ", d2";
  if (e.global_average_every > 0) out += ", an exact average every " + std::to_string(e.global_average_every) + " steps";
  if (e.consensus_control > 0.0) {
    std::ostringstream bound;
    bound << e.consensus_control;
    out += ", consensus control under " + bound.str() + " (up to " + std::to_string(e.consensus_control_max_rounds) +
           " rounds a step)";
  }
  return out;
}

}  // namespace

// What both modes share: the steps left to catch up after a re-form, and
// whether steps run apart (the pairwise protocol).
class GossipExchange::Mode : public MembershipTransitions {
 public:
  explicit Mode(GossipExchange& x) : x_(x) {}
  int64_t TakeStepsToCatchUp() override { return std::exchange(x_.steps_to_catch_up_, 0); }
  bool StepsRunApart() const override { return x_.pairwise_; }
  // An operation of the step before `next_step` failed (`what`).
  [[nodiscard]] virtual Status Failure(const Status& failure, const std::string& what, int64_t next_step) = 0;
  // Re-forms over `next`, the epoch without a lost member.
  [[nodiscard]] virtual Status ReformAt(const MembershipView& next, int64_t next_step) = 0;

 protected:
  GossipExchange& x_;
};

// Lock step: every change is a collective over the new view (ShareAndBuild).
class GossipExchange::LockstepMode final : public GossipExchange::Mode {
 public:
  using Mode::Mode;

  Status Admit(const MembershipView& next, int64_t next_step) override {
    Status s = InstallAndShare(next, next_step, /*agree=*/false);
    if (s.ok()) {
      ++x_.admissions_;
      return s;
    }
    return x_.Failed(s, "admitting at epoch " + std::to_string(next.epoch), next_step);
  }

  Status Joined() override {
    // Without the state a failure here cannot re-form: the node joins again.
    const int64_t next_step = x_.live_ != nullptr ? x_.live_->NextStep() : 0;
    Status s = StatusOf(ShareAndBuild(x_.session_->view, next_step, /*agree=*/false));
    if (s.ok()) return s;
    return x_.Failed(s, "taking the live state at epoch " + std::to_string(x_.session_->view.epoch), next_step);
  }

  Status Resumed(int64_t next_step) override {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective world,
                            gossip::Collective::Create(*x_.session_->transport, HostKeys(x_.session_->view)));
    CHORUS_ASSIGN_OR_RETURN(x_.steps_to_catch_up_,
                            CatchUpOnResume(world, x_.session_->view, x_.live_, next_step, x_.config_));
    return Status::Ok();
  }

  Status Failure(const Status& failure, const std::string& what, int64_t next_step) override {
    return x_.Failed(failure, what, next_step);
  }

  // The survivors agree on the step to go on from (steps_to_catch_up_).
  Status ReformAt(const MembershipView& next, int64_t next_step) override {
    return InstallAndShare(next, next_step, /*agree=*/true);
  }

 private:
  // Installs `next`'s peers (the protocol retired first: a pairwise
  // responder must stop before the peers change), then ShareAndBuild.
  Status InstallAndShare(const MembershipView& next, int64_t next_step, bool agree) {
    x_.RetireProtocol();
    CHORUS_RETURN_IF_ERROR(x_.session_->InstallPeers(next, ReformDeadline(x_.config_)));
    return StatusOf(ShareAndBuild(next, next_step, agree));
  }

  // Over `view`'s installed members: the live state for members that lack
  // it, then the protocol over the new graph; with `agree`, the step to
  // resume from (steps_to_catch_up_). Returns the step to run next. The
  // state goes before the protocol is built: a pairwise responder answers
  // with the weights it holds, and a joiner's must be the cluster's by then.
  Result<int64_t> ShareAndBuild(const MembershipView& view, int64_t next_step, bool agree) {
    x_.RetireProtocol();  // stops a pairwise responder before the peers change
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective world,
                            gossip::Collective::Create(*x_.session_->transport, HostKeys(view)));
    CHORUS_ASSIGN_OR_RETURN(next_step,
                            ShareLiveStateIfAny(world, view, x_.live_, next_step, ReformDeadline(x_.config_)));
    CHORUS_RETURN_IF_ERROR(x_.BuildProtocol());
    if (agree) {
      CHORUS_ASSIGN_OR_RETURN(x_.steps_to_catch_up_, StepsBehind(world, view, next_step, x_.config_));
    }
    return next_step;
  }
};

// Own pace: every view is followed on its own, with no collective; rank 0
// pushes the live state to the members new to it and trains on.
class GossipExchange::OwnPaceMode final : public GossipExchange::Mode {
 public:
  using Mode::Mode;

  Status Admit(const MembershipView& next, int64_t next_step) override {
    Status s = Follow(next, next_step);
    return s.ok() ? s : x_.Failed(s, "following epoch " + std::to_string(next.epoch), next_step);
  }

  // Takes rank 0's push of the live state, then builds the protocol. Without
  // a state by the deadline the node joins again (a new process).
  Status Joined() override {
    const MembershipView& view = x_.session_->view;
    LiveState* live = x_.live_;
    if (live != nullptr && live->NeedsState()) {
      if (view.self_rank == 0) return NobodyHoldsTheState(view.epoch);
      // A newer view must not end this transfer: it stays at the epoch that admitted this node.
      x_.session_->installed->SetRecovery(InstalledPeers::Recovery::kWaiting);
      Result<int64_t> taken = ReceivePushedLiveState(*x_.session_->transport, view, 0, *live,
                                                     Deadline::AfterSeconds(x_.config_.fabric.op_timeout_s));
      x_.session_->installed->SetRecovery(InstalledPeers::Recovery::kTraining);
      if (!taken) return taken.error().WithContext("taking the live state at epoch " + std::to_string(view.epoch));
    }
    return x_.BuildProtocol();
  }

  // Each node goes on from its own checkpoint (and the cluster's sample
  // count, which its heartbeats merge): its steps stand apart by design.
  Status Resumed(int64_t /*next_step*/) override { return Status::Ok(); }

  // An operation that ended because the control plane holds a newer view
  // follows that view; any other failure is handled as in lock step.
  Status Failure(const Status& ended, const std::string& what, int64_t next_step) override {
    if (x_.session_->control == nullptr) return x_.Failed(ended, what, next_step);  // the simulator's: one view
    const MembershipView latest = x_.session_->control->View();
    if (latest.self_rank < 0 || latest.epoch <= x_.session_->view.epoch) return x_.Failed(ended, what, next_step);
    CHORUS_LOG_INFO(Subsys::kGossip, what, " ended for membership epoch ", latest.epoch, " (", latest.Describe(),
                    "): following it");
    const double t0 = NowSeconds();
    Status s = Follow(latest, next_step);
    if (!s.ok()) return x_.Failed(s, "following epoch " + std::to_string(latest.epoch), next_step);
    CHORUS_LOG_INFO(Subsys::kGossip, "followed epoch ", latest.epoch, " in ", NowSeconds() - t0, " s");
    return s;
  }

  Status ReformAt(const MembershipView& next, int64_t next_step) override { return Follow(next, next_step); }

  // Drops the pushes that completed, failed or timed out; never blocks.
  void ReapPushes() {
    std::erase_if(pushes_, [](const std::unique_ptr<LiveStatePush>& push) { return push->Reap(); });
  }

 private:
  // Installs `next`, pushes the live state to the members new to this node
  // when it is rank 0 (LiveStatePush), and builds the protocol over the new
  // graph. `next_step`: the step this node runs next.
  Status Follow(const MembershipView& next, int64_t next_step) {
    const MembershipView before = x_.session_->view;
    x_.RetireProtocol();
    CHORUS_RETURN_IF_ERROR(x_.session_->InstallPeers(next, ReformDeadline(x_.config_)));
    LiveState* live = x_.live_;
    if (live != nullptr && next.self_rank == 0 && !live->NeedsState()) {
      for (const Member& m : next.members) {
        const Member* known = before.Find(m.name);
        if (m.rank == 0 || (known != nullptr && known->data_address == m.data_address)) continue;
        Result<std::unique_ptr<LiveStatePush>> push =
            LiveStatePush::Start(*x_.session_->transport, next, m.rank, *live, next_step,
                                 Deadline::AfterSeconds(x_.config_.fabric.op_timeout_s));
        if (!push) {
          CHORUS_LOG_WARN(Subsys::kNode, "cannot push the live state to ", m.name, ": ", push.error().message());
          continue;
        }
        pushes_.push_back(std::move(*push));
      }
    }
    CHORUS_RETURN_IF_ERROR(x_.BuildProtocol());
    if (!next.joined.empty()) ++x_.admissions_;
    if (!next.departed.empty()) ++x_.reforms_;
    return Status::Ok();
  }

  // Pushes of the live state to joiners still under way.
  std::vector<std::unique_ptr<LiveStatePush>> pushes_;
};

double ChocoGamma(const ExchangeConfig& exchange) {
  if (exchange.gamma > 0.0) return exchange.gamma;
  // Measured with 8 nodes, MLP, 3 epochs (configs/compare/gossip-8.toml):
  // sign reached 85.4 / 86.1 / 86.8 / 87.0 / 87.3% at gamma 0.1 / 0.2 / 0.4 /
  // 0.6 / 0.8 (D-PSGD uncompressed: 87.2%), while top-1% diverged at 0.8.
  // Not 0.8: on a ring (Metropolis-Hastings weights 1/3, smallest eigenvalue
  // of W -1/3 for an even ring) the step gamma * (W - I) moves the
  // alternating mode by gamma * 4/3, past its target above gamma 0.75 even
  // with exact public copies, which leaves no margin for a lossy codec's lag.
  const gossip::CodecKind codec = exchange.compression.codec;
  return codec == gossip::CodecKind::kTopK || codec == gossip::CodecKind::kRandomK ? 0.2 : 0.6;
}

Result<std::unique_ptr<GossipExchange>> GossipExchange::Create(const Config& config,
                                                               ClusterSession* session,
                                                               trainer::Trainer* trainer,
                                                               TraceWriter* trace,
                                                               double known_spectral_gap) {
  std::unique_ptr<GossipExchange> ex(new GossipExchange(config, session, trainer, trace));
  ex->known_spectral_gap_ = known_spectral_gap;
  CHORUS_RETURN_IF_ERROR(ex->BuildProtocol());
  return ex;
}

Result<topologies::Graph> GossipExchange::BuildGraph(int n) const {
  CHORUS_ASSIGN_OR_RETURN(topologies::Graph graph, GossipGraph(config_, n));
  return PlacedBySite(std::move(graph), session_->view, config_.exchange.link_aware);
}

namespace {

// The directed edges of `graph` over all its rounds whose ends are in
// different sites (`sites` by rank).
int64_t SiteCrossings(const topologies::Graph& graph, const std::vector<std::string>& sites) {
  int64_t crossings = 0;
  for (int t = 0; t < graph.Period(); ++t) {
    for (int i = 0; i < graph.NumNodes(); ++i) {
      for (int j : graph.OutNeighbors(i, t)) crossings += sites[static_cast<size_t>(i)] != sites[static_cast<size_t>(j)];
    }
  }
  return crossings;
}

}  // namespace

Result<topologies::Graph> PlacedBySite(topologies::Graph graph, const MembershipView& view, bool link_aware) {
  const std::vector<std::string> sites = SiteKeys(view, link_aware);
  if (sites.empty() || view.size() != graph.NumNodes()) return graph;
  CHORUS_ASSIGN_OR_RETURN(const std::vector<int> order, topologies::LinkAwareOrder(sites, HostKeys(view)));
  if (std::is_sorted(order.begin(), order.end())) return graph;  // one site, hosts in rank order
  CHORUS_ASSIGN_OR_RETURN(topologies::Graph placed, topologies::PlaceGraph(graph, order, "in site order"));
  // Rank order may cross less: an exponential graph over sites that
  // interleave keeps its long hops inside them.
  return SiteCrossings(placed, sites) < SiteCrossings(graph, sites) ? std::move(placed) : std::move(graph);
}

Result<topologies::Graph> GossipGraph(const Config& config, int n) {
  auto graph = topologies::MakeTopology(GossipTopologySpec(config), n);
  const std::string kind(topologies::GraphKindName(config.topology.kind));
  if (!graph) return Err(graph.error().WithContext("topology." + kind));
  if (NeedsUndirectedGraph(config.exchange.protocol) && !graph->IsUndirected()) {
    return Err(InvalidArgument("topology " + kind + " is directed; protocol " +
                               std::string(SettingName(config.exchange.protocol)) +
                               " needs an undirected graph (use push-sum)"));
  }
  return graph;
}

Status GossipExchange::BuildProtocol() {
  const MembershipView& view = session_->view;
  corrections_.Reset();  // a re-form or a joiner's state: the snapshots are another model's
  CHORUS_ASSIGN_OR_RETURN(topologies::Graph graph, BuildGraph(view.size()));
  if (known_spectral_gap_ >= 0) {
    spectral_gap_ = known_spectral_gap_;
    known_spectral_gap_ = -1.0;  // a later graph (Reform) is computed
  } else {
    auto gap = topologies::GraphSpectralGap(graph);
    spectral_gap_ = gap ? gap->gap_per_round : -1.0;
  }
  std::ostringstream neighbours;
  for (int peer : graph.OutNeighbors(view.self_rank, 0)) neighbours << " " << peer;
  CHORUS_LOG_INFO(Subsys::kGossip, "topology ", graph.Name(), " over ", view.size(),
                  " nodes: my out-neighbours (round 0):", neighbours.str(), "; spectral gap ",
                  spectral_gap_);

  graph_ = graph;
  std::vector<PeerGradientProducts::Tensor> tensors;
  for (const trainer::ParameterInfo& p : trainer_->Parameters()) tensors.push_back({p.offset, p.count});
  if (!peer_products_ && trainer_->optimizer().options().peer_products) {
    peer_products_.emplace(tensors, config_.train.seed);
  }
  if (trainer_->optimizer().options().mean_squares) {
    // Its rounds follow the graph, which a new membership rebuilds.
    mean_sketch_.emplace(tensors, config_.train.seed, graph.Period());
    const int n = static_cast<int>(view.size());
    if (config_.topology.kind == topologies::GraphKind::kOnePeerExponential && (n & (n - 1)) != 0) {
      CHORUS_LOG_WARN(Subsys::kGossip, "train.lars_norm = \"mean-sketch\" over ", n,
                      " members: the one-peer exponential graph's rounds average exactly only a power of two; "
                      "LARS's norm is that of a weighted mean");
    }
  }
  const ExchangeConfig& ec = config_.exchange;
  gossip::CodecOptions codec;
  codec.kind = ec.compression.codec;
  codec.ratio = ec.compression.ratio;
  codec.chunk = ec.compression.chunk;
  codec.value_bits = ec.compression.value_bits;
  const uint32_t epoch = static_cast<uint32_t>(view.epoch);
  gossip::Transport& t = *session_->transport;
  std::span<float> params = trainer_->MasterWeights();
  pairwise_ = false;
  const uint64_t seed = config_.train.seed;
  const double distance_bound = ec.poison_check ? ec.poison_distance_bound : 0.0;
  switch (ec.protocol) {
    case GossipProtocolKind::kDpsgd: {
      auto o = CommonOptions<gossip::DpsgdOptions>(codec, ec.period, epoch, seed, distance_bound);
      CHORUS_ASSIGN_OR_RETURN(protocol_, gossip::DpsgdGossip::Create(t, graph, o));
      break;
    }
    case GossipProtocolKind::kChoco: {
      auto o = CommonOptions<gossip::ChocoOptions>(codec, ec.period, epoch, seed, distance_bound);
      o.gamma = ChocoGamma(ec);
      CHORUS_ASSIGN_OR_RETURN(protocol_, gossip::ChocoGossip::Create(t, graph, o));
      break;
    }
    case GossipProtocolKind::kPushSum: {
      auto o = CommonOptions<gossip::PushSumOptions>(codec, ec.period, epoch, seed, distance_bound);
      CHORUS_ASSIGN_OR_RETURN(protocol_, gossip::PushSumGossip::Create(t, graph, o));
      break;
    }
    case GossipProtocolKind::kPairwiseAsync: {
      // Each node draws its own sequence of neighbours.
      auto o = CommonOptions<gossip::PairwiseOptions>(codec, ec.period, epoch,
                                                      seed + static_cast<uint64_t>(view.self_rank), distance_bound);
      o.max_staleness = ec.max_staleness;
      // Epoch 0's graph is every founder's first: no member can be on an older one.
      o.heard_partners_only = OwnPace() && view.epoch > 0;
      CHORUS_ASSIGN_OR_RETURN(protocol_, gossip::PairwiseGossip::Create(t, graph, o, params));
      pairwise_ = true;
      break;
    }
  }
  return Status::Ok();
}

std::string GossipExchange::Describe() const {
  return "gossip " + std::string(SettingName(config_.exchange.protocol)) + " on " +
         std::string(topologies::GraphKindName(config_.topology.kind)) + " over " +
         std::to_string(session_->view.size()) + " nodes (codec " +
         std::string(gossip::CodecKindName(config_.exchange.compression.codec)) + ", period " + std::to_string(config_.exchange.period) +
         CorrectionsDescription(config_.exchange) + ", " + session_->transport->Describe() + ")";
}

Status GossipExchange::AfterBackward(int64_t step, int /*local_samples*/) {
  if (corrections_.active()) corrections_.BeforeUpdate(step, trainer_->MasterWeights(), trainer_->Momentum());
  if (!graph_ || !protocol_) return Status::Ok();
  if (mean_sketch_) return MeanSketchStep(step);
  if (!peer_products_) return Status::Ok();
  const int self = session_->view.self_rank;
  const gossip::Tag tag = gossip::GossipTag(gossip::GossipMessageKind::kDpsgd, gossip::kPeerSketchTagStream,
                                            static_cast<uint32_t>(session_->view.epoch), step);
  Result<std::vector<double>> products =
      peer_products_->Exchange(*session_->transport, trainer_->Gradients(), graph_->OutNeighbors(self, step),
                               graph_->InNeighbors(self, step), tag,
                               Deadline::AfterSeconds(config_.fabric.op_timeout_s), step);
  // A failed swap is the step's mix's failure too, which handles it: this
  // step's trust ratio takes the node's own norm.
  if (!products) {
    CHORUS_LOG_DEBUG(Subsys::kGossip, "step ", step, ": gradient sketches: ", products.error().ToString());
  } else if (!products->empty()) {
    trainer_->optimizer().SetPeerProducts(std::move(*products));
    ++peer_sketch_steps_;
  }
  return Status::Ok();
}

// train.lars_norm = "mean-sketch": the members' sketches averaged exactly;
// the mean's norm goes to this step's optimizer. A failed round is the
// step's mix's failure too, which handles it.
Status GossipExchange::MeanSketchStep(int64_t step) {
  const uint32_t epoch = static_cast<uint32_t>(session_->view.epoch);
  const int rounds = mean_sketch_->rounds();
  auto tag_of = [&](int round) {
    return gossip::GossipTag(gossip::GossipMessageKind::kDpsgd, gossip::kPeerSketchTagStream, epoch,
                             step * rounds + round);
  };
  Result<std::vector<double>> squares =
      mean_sketch_->Step(*session_->transport, trainer_->Gradients(), *graph_, session_->view.self_rank, tag_of,
                         Deadline::AfterSeconds(config_.fabric.op_timeout_s), step);
  if (!squares) {
    CHORUS_LOG_DEBUG(Subsys::kGossip, "step ", step, ": mean gradient sketches: ", squares.error().ToString());
  } else if (!squares->empty()) {
    trainer_->optimizer().SetMeanSquares(std::move(*squares), 1.0 / static_cast<double>(session_->view.size()));
    ++mean_sketch_steps_;
  }
  return Status::Ok();
}

Status GossipExchange::AfterUpdate(int64_t step) {
  const int64_t begin = NowMicros();
  std::span<float> master = trainer_->MasterWeights();
  if (corrections_.active()) corrections_.BeforeMix(step, master, trainer_->Momentum());
  const ExchangeConfig& ec = config_.exchange;
  const bool global = ec.global_average_every > 0 && (step + 1) % ec.global_average_every == 0;
  // Fault injection (poison_check.h): what this node sends is poisoned; for
  // a factor its own model is restored after the mix, as it was (dividing
  // the mixed model instead shrank it at every mix, so that a few steps in
  // its messages looked like everyone's again).
  const bool poisoned = poison_fault_ && step >= poison_fault_->from_step;
  std::vector<float> own;
  if (poisoned) {
    if (!poison_fault_->nan) own.assign(master.begin(), master.end());
    for (float& w : master) w = poison_fault_->Apply(w);
  }
  Status s = global ? GlobalAverage(step) : MixRounds(step);
  if (!own.empty()) std::copy(own.begin(), own.end(), master.begin());
  if (s.ok()) ExpelRepeatOutliers();
  if (trace_) trace_->Add(global ? "global average" : "gossip mix", 1, begin, NowMicros(), step);
  if (!s.ok()) {  // the round is dropped
    corrections_.Reset();
    CHORUS_RETURN_IF_ERROR(CurrentMode().Failure(s, "step " + std::to_string(step) + ": gossip", step + 1));
  } else {
    if (corrections_.active()) corrections_.AfterMix(step, master, trainer_->Momentum());
    if (ec.consensus_control > 0.0 && (step + 1) % ec.consensus_control_every == 0) ControlConsensus(step);
  }
  trainer_->RefreshWorkingCopy();
  own_pace_->ReapPushes();
  return Status::Ok();
}

void GossipExchange::ExpelRepeatOutliers() {
  if (!config_.exchange.poison_check || config_.exchange.poison_expel_after <= 0 || !protocol_) return;
  const MembershipView& view = session_->view;
  for (gossip::Rank r : protocol_->TakeRepeatOutliers(config_.exchange.poison_expel_after)) {
    if (r < 0 || r >= view.size() || r == view.self_rank) continue;
    const std::string& name = view.members[r].name;
    // A protocol rebuilt before the view without it came counts afresh: one
    // expulsion per member.
    if (std::find(expelled_.begin(), expelled_.end(), name) != expelled_.end()) continue;
    expelled_.push_back(name);
    const std::string why = "its parameters were rejected as outliers " +
                            std::to_string(config_.exchange.poison_expel_after) + " times in a row";
    CHORUS_LOG_WARN(Subsys::kNode, "asking the cluster to expel ", name, " (rank ", r, "): ", why);
    if (session_->control) session_->control->Expel(name, why);
  }
}

Status GossipExchange::MixRounds(int64_t step) {
  const Deadline deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s);
  std::span<float> master = trainer_->MasterWeights();
  if (config_.exchange.consensus_control <= 0.0) return protocol_->Mix(master, step, deadline);
  const int64_t ids = config_.exchange.consensus_control_max_rounds;
  for (int r = 0; r < mix_rounds_; ++r) CHORUS_RETURN_IF_ERROR(protocol_->Mix(master, step * ids + r, deadline));
  return Status::Ok();
}

Status GossipExchange::GlobalAverage(int64_t step) {
  const MembershipView& view = session_->view;
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective world,
                          gossip::Collective::Create(*session_->transport, HostKeys(view)));
  gossip::AllreduceOptions o;
  o.pre_scale = 1.0f / static_cast<float>(view.size());
  o.tag_base = gossip::GossipCollectiveTagBase(gossip::kGlobalAverageTagStream, static_cast<uint32_t>(view.epoch),
                                               static_cast<uint64_t>(step));
  o.deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s);
  CHORUS_RETURN_IF_ERROR(world.Allreduce(trainer_->MasterWeights(), o).WithContext("global average"));
  ++global_averages_;
  return Status::Ok();
}

void GossipExchange::ControlConsensus(int64_t step) {
  const ExchangeConfig& ec = config_.exchange;
  const double d = control_meter_.Measure(*session_, nullptr, trainer_->MasterWeights(), step,
                                          config_.fabric.op_timeout_s, trace_, kNotMeasured);
  if (d < 0.0) return;  // not measured (logged): the rounds stay
  control_distance_ = d;
  const int before = mix_rounds_;
  if (d > ec.consensus_control) {
    mix_rounds_ = std::min(2 * mix_rounds_, ec.consensus_control_max_rounds);
  } else if (d < ec.consensus_control / 4) {
    mix_rounds_ = std::max(1, mix_rounds_ / 2);
  }
  if (mix_rounds_ != before) {
    CHORUS_LOG_INFO(Subsys::kGossip, "consensus control after step ", step, ": distance ", d, " against the bound ",
                    ec.consensus_control, ": ", mix_rounds_, " mixing rounds a step");
  }
}

bool GossipExchange::OwnPace() const { return session_ != nullptr && session_->own_pace(); }

GossipExchange::GossipExchange(const Config& config, ClusterSession* session, trainer::Trainer* trainer,
                               TraceWriter* trace)
    : config_(config),
      session_(session),
      trainer_(trainer),
      trace_(trace),
      corrections_(CorrectionOptions(config, *trainer)),
      lockstep_(std::make_unique<LockstepMode>(*this)),
      own_pace_(std::make_unique<OwnPaceMode>(*this)) {}

// The transport outlives the exchange (the session ends last): while it holds
// buffers it could not release, the protocols' buffers outlive it too.
GossipExchange::~GossipExchange() {
  if (session_ == nullptr || session_->transport == nullptr) return;
  if (protocol_ != nullptr) protocol_->Stop();  // a kept responder must not run on
  gossip::KeepWhileUnreleased(*session_->transport, protocol_);
  gossip::KeepWhileUnreleased(*session_->transport, retired_);
}

GossipExchange::Mode& GossipExchange::CurrentMode() {
  if (OwnPace()) return *own_pace_;
  return *lockstep_;
}

MembershipTransitions& GossipExchange::Transitions() { return CurrentMode(); }

Status GossipExchange::Failed(const Status& failure, const std::string& what, int64_t next_step) {
  return StopOrReform(config_, failure, what, [&] { return Reform(failure, next_step); });
}

Status GossipExchange::Reform(const Status& failure, int64_t next_step) {
  Status s = ReformOverSurvivors(*session_, config_, failure, "gossip", [&](const MembershipView& next) {
    return CurrentMode().ReformAt(next, next_step);
  });
  if (s.ok()) ++reforms_;
  return s;
}

// What the protocol averaged and has not applied (a pairwise responder's
// deltas since the last Mix) goes into the weights first: the partners
// applied their half, and dropping this one would move the models' sum.
void GossipExchange::RetireProtocol() {
  if (protocol_ == nullptr) return;
  protocol_->Retire(trainer_->MasterWeights());
  const gossip::GossipStats s = protocol_->Stats();
  retired_counts_.rejected_nonfinite += s.rejected_nonfinite;
  retired_counts_.rejected_outliers += s.rejected_outliers;
  retired_counts_.mix_rounds += s.mix_rounds;
  retired_counts_.exchanges += s.exchanges;
  retired_counts_.staleness_waits += s.staleness_waits;
  retired_counts_.staleness_wait_seconds += s.staleness_wait_seconds;
  trainer_->RefreshWorkingCopy();
  const int unreleased = session_->transport->UnreleasedBuffers();
  if (unreleased == 0) {
    protocol_.reset();
    return;
  }
  retired_.push_back(std::move(protocol_));
  CHORUS_LOG_WARN(Subsys::kGossip, "keeping the previous protocol's buffers (", retired_.size(),
                  " kept): the provider may still use them (", unreleased,
                  " cancelled operation(s) not released)");
}

Status GossipExchange::Finish() {
  std::span<float> params = trainer_->MasterWeights();
  const Deadline deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s * 4);
  if (pairwise_) {
    CHORUS_RETURN_IF_ERROR(static_cast<gossip::PairwiseGossip*>(protocol_.get())->Finish(params, deadline));
  }
  if (config_.exchange.consensus == ConsensusSetting::kNone) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective world,
                          gossip::Collective::Create(*session_->transport, HostKeys(session_->view)));
  gossip::ConsensusOptions o;
  o.method = config_.exchange.consensus == ConsensusSetting::kRounds ? gossip::ConsensusMethod::kGossip
                                                                    : gossip::ConsensusMethod::kAllreduceAverage;
  o.bound = config_.exchange.consensus_bound;
  o.max_rounds = config_.exchange.consensus_max_rounds;
  o.epoch = static_cast<uint32_t>(session_->view.epoch);
  o.deadline = deadline;
  auto graph = BuildGraph(session_->view.size());
  const topologies::Graph* g = graph && graph->IsUndirected() ? &*graph : nullptr;
  const int64_t begin = NowMicros();
  CHORUS_ASSIGN_OR_RETURN(gossip::ConsensusReport report, gossip::RunConsensus(world, g, params, o));
  consensus_before_ = report.distance_before;
  consensus_after_ = report.distance_after;
  CHORUS_LOG_INFO(Subsys::kGossip, "consensus (", SettingName(config_.exchange.consensus),
                  "): relative distance ", report.distance_before, " -> ", report.distance_after,
                  report.identical ? ", replicas bitwise identical" : "", ", checksum ",
                  report.checksum);
  CHORUS_RETURN_IF_ERROR(MakeOneModel(world, report.identical, deadline));
  if (trace_) trace_->Add("consensus", 1, begin, NowMicros(), -1);
  return Status::Ok();
}

// Rounds leave the replicas within the bound, not equal: rank 0's, within the
// bound of every other, becomes everyone's. The running statistics are then
// averaged exactly (batch_norm_state.h). Tags: FinishTagBase + k *
// kTagsPerCollective, k = 0 for the weights and 1, 2 for the statistics.
Status GossipExchange::MakeOneModel(const gossip::Collective& world, bool identical, Deadline deadline) {
  const gossip::Tag tag_base = FinishTagBase(session_->view.epoch);
  std::span<float> params = trainer_->MasterWeights();
  if (!identical && world.size() > 1) {
    gossip::CollectiveOptions bo;
    bo.tag_base = tag_base;
    bo.deadline = deadline;
    CHORUS_RETURN_IF_ERROR(world.Broadcast(std::as_writable_bytes(params), 0, bo).WithContext("final model"));
    CHORUS_LOG_INFO(Subsys::kGossip, "every node takes rank 0's replica: checksum ", WeightsChecksum(params));
  }
  trainer_->RefreshWorkingCopy();
  return AverageBatchNormState(world, *trainer_, tag_base + gossip::kTagsPerCollective, deadline);
}

Result<double> GossipExchange::ExactConsensusDistance(int64_t step) {
  if (pairwise_ || !evaluations_in_lockstep_ || session_->view.size() < 2) return kNotMeasured;
  return meter_.Measure(*session_, nullptr, trainer_->MasterWeights(), step, config_.fabric.op_timeout_s, trace_,
                        kNotMeasured);
}

bool GossipExchange::StartConsensusMeasurement(int64_t epochs_done) {
  if (!pairwise_ || !evaluations_in_lockstep_ || virtual_time_ || session_->view.size() < 2) return false;
  return background_meter_.Start(*session_->transport, session_->view, trainer_->MasterWeights(), epochs_done,
                                 config_.fabric.op_timeout_s);
}

nlohmann::json GossipExchange::Metrics() const {
  // The measurements' bytes left out (the background meter's read first: it
  // may count a message before the transport does).
  MeasureCost measures = background_meter_.cost();
  measures += meter_.cost();
  nlohmann::json m = measures.TrainingBytes(session_->transport->Stats());
  m.update({{"membership_epoch", session_->view.epoch},
             {"world_size", session_->view.size()},
             {"spectral_gap", spectral_gap_},
             {"reforms", reforms_},
             {"admissions", admissions_}});
  // Counts over the run: the protocols a re-form retired, and this one. Also
  // between a retirement and the next protocol (a view followed as the run
  // ends), so that what was rejected and expelled is never left out.
  const gossip::GossipStats s = protocol_ ? protocol_->Stats() : gossip::GossipStats{};
  const gossip::GossipStats& r = retired_counts_;
  if (protocol_) {
    m["consensus_distance_estimate"] = s.neighbor_distance;
    m["max_staleness_seen"] = s.max_staleness_seen;
  }
  m["rejected_nonfinite"] = r.rejected_nonfinite + s.rejected_nonfinite;
  m["poison"] = {{"rejected_outliers", r.rejected_outliers + s.rejected_outliers}, {"expelled", expelled_}};
  m["mix_rounds"] = r.mix_rounds + s.mix_rounds;
  m["exchanges"] = r.exchanges + s.exchanges;
  if (pairwise_) {
    m["staleness_waits"] = r.staleness_waits + s.staleness_waits;
    m["staleness_wait_seconds"] = r.staleness_wait_seconds + s.staleness_wait_seconds;
  }
  measures.AddMetrics(m);
  if (peer_products_) {
    m["lars_peer_norm"] = {{"steps", peer_sketch_steps_}, {"rejected_sketches", peer_products_->rejected()}};
  }
  if (mean_sketch_) {
    m["lars_mean_norm"] = {{"steps", mean_sketch_steps_}, {"rounds", mean_sketch_->rounds()},
                           {"rejected_sketches", mean_sketch_->rejected()}};
  }
  if (config_.exchange.consensus_control > 0.0) {
    m["mix_rounds_per_step"] = mix_rounds_;
    if (control_distance_ >= 0.0) m["consensus_control_distance"] = control_distance_;
  }
  if (config_.exchange.global_average_every > 0) m["global_averages"] = global_averages_;
  if (consensus_before_ >= 0) {
    m["consensus_distance_before"] = consensus_before_;
    m["consensus_distance_after"] = consensus_after_;
  }
  return m;
}

}  // namespace chorus::node
