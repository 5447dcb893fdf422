// GossipExchange: decentralized training. After each local optimizer step the
// FP32 master weights are mixed with the neighbours on the configured graph by
// the configured protocol (D-PSGD, pairwise async, push-sum, CHOCO with a
// codec; local SGD through exchange.period); at the end a consensus phase makes
// every replica the same, BatchNorm statistics included (exchange.consensus
// "none" leaves them as they are). A dead neighbour makes the node wait for
// the next membership epoch, rebuild the graph over the survivors and go on.
//
// Must not: know a protocol's internals; it only picks and drives one.
#pragma once

#include <memory>
#include <utility>
#include <vector>
#include <optional>

#include "gossip/collectives/collective.h"
#include "gossip/protocols/gossip_protocol.h"
#include "node/cluster/cluster_session.h"
#include "node/cluster/live_state.h"
#include "node/config/config.h"
#include "node/exchange/consensus_meter.h"
#include "node/exchange/exchange.h"
#include "node/exchange/gossip_corrections.h"
#include "node/exchange/mean_sketch.h"
#include "node/exchange/membership_transitions.h"
#include "node/exchange/peer_gradient_products.h"
#include "node/exchange/poison_check.h"
#include "node/outputs/trace.h"
#include "topologies/graph.h"
#include "trainer/trainer.h"

namespace chorus::node {

class GossipExchange final : public Exchange {
 public:
  // `known_spectral_gap` >= 0: the spectral gap of the first graph, already
  // computed by the caller (`chorus simulate` builds hundreds of exchanges over
  // one graph; the exact gap is O(n^3) each); < 0: computed here.
  [[nodiscard]] static Result<std::unique_ptr<GossipExchange>> Create(
      const Config& config, ClusterSession* session, trainer::Trainer* trainer, TraceWriter* trace,
      double known_spectral_gap = -1.0);
  ~GossipExchange() override;

  std::string Describe() const override;
  // Quasi-global momentum and D^2 (gossip_corrections.h): x_t and the
  // momentum before the update. LARS's peer norm (train.lars_norm "peer"):
  // the gradient's sketch swapped with the step's neighbours, whose products
  // the optimizer's step takes (peer_gradient_products.h).
  [[nodiscard]] Status AfterBackward(int64_t step, int local_samples) override;
  // The mixing of the step: the protocol's round (consensus control's rounds),
  // or every exchange.global_average_every steps the exact average; the
  // corrections around it.
  [[nodiscard]] Status AfterUpdate(int64_t step) override;
  [[nodiscard]] Status Finish() override;
  // Bytes and seconds of the measurements stay out of bytes_sent and
  // bytes_received (consensus_measure_bytes_sent, consensus_measure_seconds):
  // curves against bytes show what training costs.
  nlohmann::json Metrics() const override;
  // Two all-reduces over the members (consensus.h), on the tag stream
  // gossip::kDistanceTagStream at call index 2 * step; a second call after the
  // same step returns the first's result without communicating.
  [[nodiscard]] Result<double> ExactConsensusDistance(int64_t step) override;
  // Pairwise-async in real time: the measurement beside training
  // (background_consensus_meter.h); its bytes stay out of the counts too.
  bool StartConsensusMeasurement(int64_t epochs_done) override;
  std::vector<ConsensusMeasurement> TakeConsensusMeasurements(bool wait) override {
    return background_meter_.Take(wait);
  }
  // Lock step or own pace, as the session's pacing says (PacingOf).
  MembershipTransitions& Transitions() override;
  // Push-sum's mass carries a node's samples into the average (kUpdate). The
  // doubly-stochastic protocols stay unweighted: on a ring, weighting D-PSGD's
  // updates by batch cost 3 pp (docs/clusters-and-failures.md, "Unequal nodes").
  Weighting SampleWeighting() const override {
    return config_.exchange.protocol == GossipProtocolKind::kPushSum ? Weighting::kUpdate : Weighting::kNone;
  }

 private:
  GossipExchange(const Config& config, ClusterSession* session, trainer::Trainer* trainer, TraceWriter* trace);
  // AfterBackward under train.lars_norm = "mean-sketch" (mean_sketch.h).
  [[nodiscard]] Status MeanSketchStep(int64_t step);
  [[nodiscard]] Result<topologies::Graph> BuildGraph(int n) const;
  [[nodiscard]] Status BuildProtocol();
  // A failed operation (`what`): stops (exchange.on_failure = "stop") or
  // re-forms (Reform).
  [[nodiscard]] Status Failed(const Status& failure, const std::string& what, int64_t next_step);
  // Waits for the next membership epoch and re-forms over it (ReformAt),
  // again at a later epoch if a member dies meanwhile (ReformOverSurvivors).
  [[nodiscard]] Status Reform(const Status& failure, int64_t next_step);
  // The two membership modes (membership_transitions.h) over this
  // exchange's parts. Each also handles what fails inside a step (Failure)
  // and the re-form after it (ReformAt).
  class Mode;
  class LockstepMode;
  class OwnPaceMode;
  Mode& CurrentMode();
  // The session's pacing (ClusterSession::own_pace, set by the training
  // loop): every view is followed on its own, with no collective.
  bool OwnPace() const;
  // Ends the protocol: destroyed, or stopped and kept while the transport has
  // receives into buffers that the provider never released.
  void RetireProtocol();
  // After the consensus phase over `world`: the replicas' bytes made one
  // (rank 0's, unless `identical` already) and the BatchNorm statistics averaged.
  [[nodiscard]] Status MakeOneModel(const gossip::Collective& world, bool identical, Deadline deadline);
  // The protocol's rounds of `step`: one, or consensus control's mix_rounds_
  // (round ids step * max_rounds + r, the same on every member).
  // Accuses the neighbours whose values the protocol rejected as outliers
  // exchange.poison_expel_after times in a row (ControlPlane::Expel: the
  // cluster expels one that cluster.expel_quorum members accuse).
  void ExpelRepeatOutliers();
  [[nodiscard]] Status MixRounds(int64_t step);
  // Gossip-PGA: every member's master replaced by the members' mean.
  [[nodiscard]] Status GlobalAverage(int64_t step);
  // Consensus control (Kong et al. 2021): the exact distance measured, and
  // the rounds per step doubled above exchange.consensus_control, halved
  // under a quarter of it; every member measures the same value, so all
  // choose alike.
  void ControlConsensus(int64_t step);

  const Config& config_;
  ClusterSession* session_;
  trainer::Trainer* trainer_;
  TraceWriter* trace_;
  std::unique_ptr<gossip::GossipProtocol> protocol_;
  // Protocols whose buffers a receive the provider never released may still
  // write into: kept, stopped, instead of freed (RetireProtocol).
  std::vector<std::unique_ptr<gossip::GossipProtocol>> retired_;
  // The counters of the protocols retired so far (re-forms, admissions):
  // the metrics count over the run, not since the last rebuild.
  gossip::GossipStats retired_counts_;
  bool pairwise_ = false;
  double spectral_gap_ = 0.0;
  double known_spectral_gap_ = -1.0;  // for the first graph only (Create)
  double consensus_before_ = -1.0, consensus_after_ = -1.0;
  // ExactConsensusDistance: the last step measured and its result, and what
  // the measurements cost.
  ConsensusMeter meter_;
  BackgroundConsensusMeter background_meter_;
  GossipCorrections corrections_;
  // LARS's peer norm: the sketches' exchange, over graph_ (the protocol's).
  std::optional<PeerGradientProducts> peer_products_;
  std::optional<topologies::Graph> graph_;
  uint64_t peer_sketch_steps_ = 0;  // steps whose products reached the optimizer
  // LARS's mean-gradient norm: the sketches' averages, over graph_.
  std::optional<MeanSketch> mean_sketch_;
  uint64_t mean_sketch_steps_ = 0;  // steps whose mean's norm reached the optimizer
  // The contribution check (poison_check.h): a fault to inject, and the
  // members this node expelled for repeated outliers.
  std::optional<PoisonFault> poison_fault_ = PoisonFaultAsked();
  std::vector<std::string> expelled_;
  // Consensus control: its own meter (its bytes are training's), the rounds
  // per step it chose and the distance it last measured.
  ConsensusMeter control_meter_{gossip::kConsensusControlTagStream};
  int mix_rounds_ = 1;
  double control_distance_ = -1.0;
  uint64_t global_averages_ = 0;
  uint64_t reforms_ = 0;
  uint64_t admissions_ = 0;
  int64_t steps_to_catch_up_ = 0;
  std::unique_ptr<LockstepMode> lockstep_;
  std::unique_ptr<OwnPaceMode> own_pace_;
};

// The gossip graph of `config` over `n` ranks (the one every GossipExchange of
// that config builds): "ring" is the bidirectional ring for the symmetric
// protocols; InvalidArgument for a directed graph under one of them.
[[nodiscard]] Result<topologies::Graph> GossipGraph(const Config& config, int n);
// `graph` over `view`'s members placed in link-aware order (topologies::PlaceGraph
// with LinkAwareOrder of their sites and hosts) when `link_aware`, that
// order is not rank order, and the placed graph has fewer edges across
// sites over its rounds than in rank order: its short edges inside sites,
// few across them, the spectral gap unchanged.
[[nodiscard]] Result<topologies::Graph> PlacedBySite(topologies::Graph graph, const MembershipView& view,
                                                     bool link_aware);

// CHOCO's consensus step size: exchange.gamma, or when it is 0 the default of
// the codec (sparse codecs need a smaller step to stay stable).
double ChocoGamma(const ExchangeConfig& exchange);

}  // namespace chorus::node
