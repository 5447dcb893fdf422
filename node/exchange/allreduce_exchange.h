// AllreduceExchange: synchronous data parallelism. The trainer's gradient-ready
// hook marks parameters in the fusion engine, whose communication thread
// all-reduces each bucket while backward goes on; AfterBackward waits for the
// rest. Gradients are weighted by samples: the trainer multiplies each
// node's by W * local batch / global batch (SampleWeighting: kGradient) and
// the all-reduce takes the mean over the W ranks (pre_scale = 1 / W), so nodes
// with different batch sizes, or the load balancer's split, train the
// gradient of the whole global batch and every node applies the same update.
//
// A failed collective (dead peer) either stops the node cleanly
// (exchange.on_failure = "stop") or waits for the next membership epoch,
// re-forms the collective over the survivors, where every survivor takes the
// new rank 0's live state (parameters, momentum, loss scaler, BatchNorm
// statistics, step and place in the data), and abandons that step on every
// survivor (TakeStepAbandoned: no update is applied for it, and its batch is
// trained again).
//
// Must not: change the model other than through the trainer's buffers.
#pragma once

#include <memory>
#include <utility>

#include "gossip/collectives/collective.h"
#include "gossip/fusion/fusion_engine.h"
#include "node/cluster/cluster_session.h"
#include "node/config/config.h"
#include "node/exchange/exchange.h"
#include "node/exchange/first_bucket_tuner.h"
#include "node/exchange/poison_audit.h"
#include "node/exchange/poison_check.h"
#include "node/outputs/trace.h"
#include "trainer/trainer.h"

namespace chorus::node {

// Lock step only: the exchange is its own MembershipTransitions.
class AllreduceExchange final : public Exchange, public MembershipTransitions {
 public:
  [[nodiscard]] static Result<std::unique_ptr<AllreduceExchange>> Create(
      const Config& config, ClusterSession* session, trainer::Trainer* trainer, TraceWriter* trace);
  ~AllreduceExchange() override;

  std::string Describe() const override;
  // FP16 on the wire: the step's loss scale is the wire scale (FusionEngine).
  [[nodiscard]] Status BeforeStep(int64_t step) override;
  [[nodiscard]] Status AfterBackward(int64_t step, int local_samples) override;
  // Ends with one model on every node: the BatchNorm statistics averaged
  // (batch_norm_state.h) and, with a GPU in the cluster, rank 0's weights (see .cc).
  [[nodiscard]] Status Finish() override;
  nlohmann::json Metrics() const override;
  // 0 without communicating: every node applies the same update to the same
  // weights (with a GPU in the cluster, the same up to rounding; Finish makes
  // them one).
  [[nodiscard]] Result<double> ExactConsensusDistance(int64_t /*step*/) override { return 0.0; }
  Weighting SampleWeighting() const override { return Weighting::kGradient; }
  void SetMemberShares(const std::vector<int>& shares) override;
  [[nodiscard]] Result<std::vector<double>> GatherFromMembers(double mine) override;

  MembershipTransitions& Transitions() override { return *this; }
  int64_t TakeStepsToCatchUp() override { return std::exchange(steps_to_catch_up_, 0); }
  [[nodiscard]] Status Resumed(int64_t next_step) override;
  bool TakeStepAbandoned() override { return std::exchange(step_abandoned_, false); }
  bool StepsInLockstep() const override { return true; }
  [[nodiscard]] Status Admit(const MembershipView& next, int64_t next_step) override;
  [[nodiscard]] Status Joined() override;

 private:
  AllreduceExchange(const Config& config, ClusterSession* session, trainer::Trainer* trainer,
                    TraceWriter* trace)
      : config_(config),
        session_(session),
        trainer_(trainer),
        trace_(trace),
        poison_(config.exchange.poison_expel_after),
        audit_(config.exchange.poison_audit_always) {}
  [[nodiscard]] Status Build();
  // The bucketer and fusion engine over the built collective, with the first
  // bucket capped at `first_bucket_bytes` (0: bucket_kib).
  [[nodiscard]] Status BuildEngine(size_t first_bucket_bytes);
  // first_bucket_kib = -1 (auto), once the tuner's steps are measured: every
  // rank's figures gathered, the overlap model's choice (the same on every
  // rank), and the engine rebuilt with the chosen first bucket.
  [[nodiscard]] Status DecideFirstBucket();
  // Bytes of one gradient element on the wire (FP16 with exchange.fp16_wire).
  size_t WireElementBytes() const { return config_.exchange.fp16_wire ? sizeof(uint16_t) : sizeof(float); }
  // A failed operation (`what`): stops (exchange.on_failure = "stop") or
  // re-forms (Reform).
  [[nodiscard]] Status Failed(const Status& failure, const std::string& what, int64_t next_step, bool abandon);
  // Installs `next`, rebuilds over it and gives members that joined the live
  // state (the admission); the step to run next.
  [[nodiscard]] Result<int64_t> InstallAndShare(const MembershipView& next, int64_t next_step);
  // Waits for the next membership epoch and re-forms over it (ReformAt),
  // again at a later epoch if a member dies meanwhile (ReformOverSurvivors).
  [[nodiscard]] Status Reform(const Status& failure, int64_t next_step, bool abandon);
  // Installs `next`, rebuilds over it, gives members that joined the live
  // state, and every survivor takes the new rank 0's live state (its step
  // and place in the data too). `abandon`: the loop's current step is
  // applied nowhere, and its batch is trained again (LiveState::PutBackStep).
  [[nodiscard]] Status ReformAt(const MembershipView& next, int64_t next_step, bool abandon);
  // After step `step`'s all-reduce: every member's contribution gathered and
  // judged (poison_check.h; poison_audit.h once a member misreported its own
  // in this epoch, which audits its remaining steps); the step is abandoned
  // when the verdict says so, and members named too often in a row are
  // expelled.
  // `local_samples`: this member's samples in the step (its weight).
  [[nodiscard]] Status CheckContributions(int64_t step, int local_samples);

  const Config& config_;
  ClusterSession* session_;
  trainer::Trainer* trainer_;
  TraceWriter* trace_;
  gossip::AllreduceAlgorithm algorithm_ = gossip::AllreduceAlgorithm::kAuto;
  std::unique_ptr<gossip::Collective> collective_;
  std::unique_ptr<gossip::FusionEngine> engine_;
  gossip::BucketSizes bucket_sizes_;
  FirstBucketTuner tuner_;
  std::string first_bucket_choice_;  // the overlap model's reason, for Describe
  size_t buckets_ = 0;
  std::string resolved_;  // what each bucket's all-reduce runs (ResolvedAlgorithms), for Describe
  Status hook_error_;
  uint64_t reforms_ = 0;
  uint64_t admissions_ = 0;
  int64_t steps_to_catch_up_ = 0;
  bool step_abandoned_ = false;
  uint64_t failed_steps_ = 0;
  bool checks_contributions_ = false;  // exchange.poison_check over at least 3 members
  PoisonLedger poison_;
  std::optional<PoisonFault> claim_fault_;  // fault injection: overstated samples (poison_check.h)
  AuditSwitch audit_;  // which epoch's steps are audited (poison_audit.h)
  // Fault injection: a misreported or equivocated contribution (poison_check.h).
  std::optional<PoisonFault> report_fault_;
  EpochShares shares_;  // SetMemberShares
  int unreleased_at_engine_ = 0;  // the transport's UnreleasedBuffers when the engine was built
};

// Each [exchange.crossovers] key: its KiB field, the byte size it sets, and
// whether that size is an upper (inclusive) or a lower bound. The one table
// behind CrossoversFromConfig and the fitted TOML (bench_allreduce.h).
struct CrossoverKey {
  std::string_view key;
  int CrossoversConfig::*kib;
  size_t gossip::AllreduceCrossovers::*bytes;
  bool upper_bound;
};
inline constexpr CrossoverKey kCrossoverKeys[] = {
    {"small_tree_max_kib", &CrossoversConfig::small_tree_max_kib,
     &gossip::AllreduceCrossovers::small_tree_max_bytes, true},
    {"recursive_doubling_max_kib", &CrossoversConfig::recursive_doubling_max_kib,
     &gossip::AllreduceCrossovers::recursive_doubling_max_bytes, true},
    {"tree_max_kib", &CrossoversConfig::tree_max_kib, &gossip::AllreduceCrossovers::tree_max_bytes, true},
    {"halving_doubling_min_kib", &CrossoversConfig::halving_doubling_min_kib,
     &gossip::AllreduceCrossovers::halving_doubling_min_bytes, false},
    {"halving_doubling_max_kib", &CrossoversConfig::halving_doubling_max_kib,
     &gossip::AllreduceCrossovers::halving_doubling_max_bytes, true},
    {"large_tree_min_kib", &CrossoversConfig::large_tree_min_kib,
     &gossip::AllreduceCrossovers::large_tree_min_bytes, false},
    {"hierarchical_min_kib", &CrossoversConfig::hierarchical_min_kib,
     &gossip::AllreduceCrossovers::hierarchical_min_bytes, false},
};

// What `auto` picks by over `provider`: its defaults (gossip::CrossoversForProvider)
// with the sizes [exchange.crossovers] sets.
gossip::AllreduceCrossovers CrossoversFromConfig(gossip::FabricProvider provider, const CrossoversConfig& x);

}  // namespace chorus::node
