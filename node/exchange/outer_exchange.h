// OuterExchange: low-communication training ([exchange.outer]). Each node
// trains alone with its inner optimizer (LARS or SGD, FP16 with the FP32
// master); every exchange.outer.period steps it averages with its peers and
// takes an outer optimizer step on its FP32 outer parameters
// (gossip/protocols/outer_step.h has the arithmetic):
//   - exchange.kind = "allreduce": the peers are every member, over the
//     configured all-reduce algorithm (DiLoCo; optimizer "average" is local
//     SGD). The outer parameters stay equal on every node.
//   - exchange.kind = "gossip": the peers are the [topology] neighbours, or
//     with peers = "random" one random peer per round, drawn alike on every
//     node (NoLoCo). Outer parameters differ; the outer gradient pulls each
//     toward its group's.
// Without compression the nodes send their parameters (the mean of the
// parameters gives the mean pseudo-gradient exactly); with a lossy
// [exchange.compression] codec the pseudo-gradient travels compressed with
// error feedback (top-k with 8-bit values: SparseLoCo), all-gathered over
// every member or sent with the outer parameters to the group.
//
// Streaming (fragments = F > 1): the parameters are cut into F ranges synced
// in turn, period / F steps apart. With delay = d > 0 a fragment's
// communication runs on a helper thread while the next d inner steps
// compute, and its outer update lands d steps after it began, mixed into
// the parameters with local_mix (Streaming DiLoCo). At most one fragment is
// in flight (the config keeps d < period / F). Under virtual time
// (SetVirtualTime) the communication runs when the sync begins, on the
// node's thread, and still lands d steps later.
//
// Two levels (inner = "site", all-reduce only): after every inner step the
// node averages its parameters with its cluster.site (SiteLevels), and the
// outer step's mean runs across sites, by one representative per site
// unless site_representatives is false.
//
// Membership: a failed sync re-forms over the survivors (exchange.on_failure).
// When every survivor failed that same sync (the usual case: a member died
// between syncs or in one) and it carried plain parameters (all-reduce, no
// codec), the survivors run it again among themselves and land it, so that
// each survivor's inner steps since the last sync count. Otherwise every
// survivor takes the new rank 0's parameters, momentum, loss scale, BatchNorm
// statistics and outer state, and the others' inner steps are dropped. A joiner takes a member's live state,
// outer state included (SavedState). An in-flight fragment lands early, on
// every member at the same step, before any membership change.
//
// Must not: change the model other than through the trainer's buffers.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <utility>

#include "gossip/codecs/codec.h"
#include "gossip/collectives/collective.h"
#include "gossip/protocols/outer_step.h"
#include "node/cluster/cluster_session.h"
#include "node/config/config.h"
#include "node/exchange/consensus_meter.h"
#include "node/exchange/exchange.h"
#include "node/exchange/poison_audit.h"
#include "node/exchange/poison_check.h"
#include "node/exchange/site_average_check.h"
#include "node/exchange/site_levels.h"
#include "node/outputs/trace.h"
#include "topologies/graph.h"
#include "trainer/trainer.h"

namespace chorus::node {

// An outer exchange's fragment sync: begun after step `step`, its outer update lands after
// step `land_step`. `params` is the node's snapshot of the fragment; `base`
// gets the group's mean of the parameters.
struct OuterSync {
  int fragment = 0;
  int64_t step = 0;
  int64_t land_step = 0;
  std::vector<float> params;
  std::vector<float> base;
  // This member's weight in the mean over every member (OuterExchange::SampleWeight
  // when the sync began).
  double weight = 1.0;
  int64_t begin_us = 0;
  int64_t end_us = 0;
  std::future<Status> done;  // valid while it runs on the helper thread
  Status status;
  gossip::AuditFigures audit;  // an audited sync's (poison_audit.h); empty otherwise
  // What this member put into the sum (norm in the mean's share, finite)
  // where that is not its pseudo-gradient: with a codec, what its encodings
  // kept, or (audited) the pseudo-gradient with its residual.
  std::optional<std::pair<double, bool>> sent;
  // With a codec: the predecessor on the ring sent non-finite values, taken
  // as zeros; this member's view of the mean is then reported non-finite.
  bool received_nonfinite = false;
};

// Lock step only: the exchange is its own MembershipTransitions.
class OuterExchange final : public Exchange, public MembershipTransitions {
 public:
  [[nodiscard]] static Result<std::unique_ptr<OuterExchange>> Create(const Config& config, ClusterSession* session,
                                                                     trainer::Trainer* trainer, TraceWriter* trace);
  ~OuterExchange() override;

  std::string Describe() const override;
  [[nodiscard]] Status AfterUpdate(int64_t step) override;
  // Lands a fragment in flight, then makes the replicas one: an all-reduce
  // average unless they are equal already (every fragment synced at the last
  // step over every member), and the BatchNorm statistics averaged.
  [[nodiscard]] Status Finish() override;
  nlohmann::json Metrics() const override;
  // Two all-reduces over the members (gossip/protocols/consensus.h); the
  // replicas differ between outer steps.
  [[nodiscard]] Result<double> ExactConsensusDistance(int64_t step) override;
  // Over every member (train.balance = "time": the speeds, gathered right
  // after an outer sync, so the inner steps between syncs take one length).
  [[nodiscard]] Result<std::vector<double>> GatherFromMembers(double mine) override;
  void SetMemberShares(const std::vector<int>& shares) override;
  std::map<std::string, std::vector<float>> SavedState() const override;
  [[nodiscard]] Status RestoreSavedState(const std::map<std::string, std::vector<float>>& state) override;

  MembershipTransitions& Transitions() override { return *this; }
  int64_t TakeStepsToCatchUp() override { return std::exchange(steps_to_catch_up_, 0); }
  [[nodiscard]] Status Resumed(int64_t next_step) override;
  // Every outer step needs every member of its group.
  bool StepsInLockstep() const override { return true; }
  [[nodiscard]] Status Admit(const MembershipView& next, int64_t next_step) override;
  [[nodiscard]] Status Joined() override;
  [[nodiscard]] Status MembersLost(int64_t next_step) override;

 private:
  OuterExchange(const Config& config, ClusterSession* session, trainer::Trainer* trainer, TraceWriter* trace)
      : config_(config),
        session_(session),
        trainer_(trainer),
        trace_(trace),
        poison_(config.exchange.poison_expel_after),
        poison_fault_(PoisonFaultAsked()),
        audit_(config.exchange.poison_audit_always),
        site_poison_(config.exchange.poison_expel_after),
        site_check_({config.exchange.poison_check, CheckRulesFrom(config), config.exchange.poison_audit_always,
                     config.fabric.op_timeout_s},
                    PoisonFaultAsked(/*inside_site=*/true)) {}

  // The collective and the group graph over the current membership.
  [[nodiscard]] Status Build();
  // Starts fragment `fragment`'s sync after step `step` (on the helper thread
  // when it lands later).
  [[nodiscard]] Status Begin(int fragment, int64_t step);
  // The communication of `sync`: its base from the group.
  [[nodiscard]] Status Communicate(OuterSync& sync);
  [[nodiscard]] Status AverageOverAll(OuterSync& sync, gossip::Tag tag_base, Deadline deadline);
  // AverageOverAll in an audited epoch: every member's pseudo-gradient (and
  // residual) summed whole, flat over every member, each measured.
  [[nodiscard]] Status AuditedAverage(OuterSync& sync, gossip::Tag tag_base, Deadline deadline);
  [[nodiscard]] Status AverageOverGroup(OuterSync& sync, gossip::Tag tag_base, Deadline deadline);
  // The outer collectives' all-reduce options: the configured algorithm
  // and crossovers, at `tag_base`, by `deadline`.
  gossip::AllreduceOptions AllreduceOptionsAt(gossip::Tag tag_base, Deadline deadline) const;
  // Two levels: the exchange inside the site after step `step`, gossip or
  // the site's average (a failure re-forms, dropping a sync in flight).
  [[nodiscard]] Status InsideSite(int64_t step);
  // The site average's check after step `step` (SiteAverageCheck): logged,
  // recorded, and its offenders accused.
  void ReportSiteCheck(const StepCheck& check, int64_t step);
  // After AverageOverAll: every member's pseudo-gradient checked
  // (poison_check.h; audited, poison_audit.h, for the rest of an epoch in
  // which a member misreported its own); a sync the verdict abandons lands
  // as no change (its base is the anchor) on every member.
  [[nodiscard]] Status CheckContributions(OuterSync& sync);
  // Waits for the sync in flight and lands its outer update (a failure
  // re-forms; the update is then dropped).
  [[nodiscard]] Status Land();
  // This member's weight in the outer step's mean over every member: W * b / B
  // for its share b of the global batch B over W members (SetMemberShares),
  // so that every sample counts the same, as in an all-reduce step; 1 with
  // equal shares, shares of another membership, or site representatives (a
  // representative speaks for its site, weighed by SiteSharesNow).
  double SampleWeight() const;
  // This member's and its site's shares at the two levels (SiteLevels::
  // SharesFrom) under the current view's shares. Only with sites.
  SiteShares SiteSharesNow() const;
  // The peers of this node's outer step after step `step` (sorted ranks, self
  // included).
  std::vector<int> GroupOf(int64_t step) const;
  [[nodiscard]] Status Failed(const Status& failure, const std::string& what, int64_t next_step);
  [[nodiscard]] Status Reform(const Status& failure, int64_t next_step);
  [[nodiscard]] Result<int64_t> InstallAndShare(const MembershipView& next, int64_t next_step);
  // Every member of `view` takes rank 0's parameters, momentum, loss scale,
  // BatchNorm statistics and outer state, and the largest `next_step`.
  [[nodiscard]] Status Resynchronize(const MembershipView& view, int64_t next_step);
  // After a re-form to `view`: whether every member failed the same sync
  // (failed_) and may run it again; collective over `view`.
  [[nodiscard]] Result<bool> SameSyncFailedEverywhere(const MembershipView& view);
  // The outer update of `sync`, whose base is the group's mean: onto the
  // outer parameters, and mixed into the model.
  void ApplyOuterUpdate(const OuterSync& sync);

  const Config& config_;
  ClusterSession* session_;
  trainer::Trainer* trainer_;
  TraceWriter* trace_;
  gossip::OuterStepOptions step_options_;
  std::unique_ptr<gossip::Codec> codec_;  // null: parameters travel as FP32
  std::unique_ptr<gossip::Collective> collective_;
  std::optional<SiteLevels> sites_;  // inner = "site" or "site-gossip"
  std::optional<topologies::Graph> graph_;  // gossip with the neighbours
  std::vector<gossip::FragmentRange> fragments_;
  std::vector<float> anchor_, velocity_, residual_;
  PoisonLedger poison_;
  std::optional<PoisonFault> poison_fault_;
  AuditSwitch audit_;  // which epoch's syncs over all members are audited (poison_audit.h)
  // The averages inside the site, checked on the training thread (the
  // syncs' ledger is the helper thread's).
  PoisonLedger site_poison_;
  SiteAverageCheck site_check_;
  std::optional<OuterSync> in_flight_;
  std::optional<OuterSync> failed_;  // the sync whose failure the re-form in progress follows
  // Steps since each fragment last landed with delay 0 over every member:
  // all 0 at the end means the replicas are equal.
  int64_t last_step_ = -1;
  EpochShares shares_;  // SetMemberShares
  std::vector<int64_t> landed_after_;
  uint64_t outer_steps_ = 0;
  double overlapped_seconds_ = 0.0, waited_seconds_ = 0.0;
  uint64_t reforms_ = 0, admissions_ = 0, syncs_retried_ = 0;
  int64_t steps_to_catch_up_ = 0;
  ConsensusMeter meter_;
  double consensus_before_ = -1.0;
};

}  // namespace chorus::node
