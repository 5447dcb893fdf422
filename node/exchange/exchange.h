// node/exchange/: what runs each step to keep the replicas together (all-reduce,
// gossip, none), built from the config by one factory (exchange_factory.h).
//
// Exchange: how a node keeps its replica together with the others, as seen by
// the training loop. The loop calls, per step:
//
//   BeforeStep(step)          e.g. arm the fusion buckets for this step
//   trainer.ForwardBackward   (gradient-ready hooks may start all-reduces)
//   AfterBackward(step, n)    all-reduce: wait for every bucket; n = local samples
//   trainer.ApplyUpdate       LARS / SGD on the FP32 master
//   AfterUpdate(step)         gossip: mix the master with neighbours
//
// and Finish() once after the last step (consensus phase), after which every
// node holds the same model, BatchNorm statistics included. At each evaluation
// the loop asks for ExactConsensusDistance. What happens when the membership
// changes is apart, in Transitions() (membership_transitions.h). The single-node exchange does
// nothing. Implementations live in node/ (wiring gossip/ to the
// trainer); the trainer never sees them.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "node/cluster/live_state.h"
#include "node/control/membership.h"
#include "node/exchange/background_consensus_meter.h"
#include "node/exchange/membership_transitions.h"

namespace chorus::node {

// Every member's batch share as Exchange::SetMemberShares gave them, with the
// membership epoch they were given in: they hold for that membership only (a
// re-form installs a view before the training loop installs its shares).
struct EpochShares {
  std::vector<int> shares;  // by rank
  uint64_t epoch = 0;
  // The shares when they are `view`'s, else null.
  const std::vector<int>* For(const MembershipView& view) const {
    return epoch == view.epoch && shares.size() == static_cast<size_t>(view.size()) ? &shares : nullptr;
  }
};

// The sample weight of the member with share `own` of the global batch
// sum(shares) over shares.size() members: W * own / B, so that every sample
// of the global batch counts the same.
inline double SampleWeightOf(std::span<const int> shares, int own) {
  int64_t total = 0;
  for (int s : shares) total += s;
  return static_cast<double>(shares.size()) * own / static_cast<double>(total > 0 ? total : 1);
}

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual std::string Describe() const = 0;
  // Where a joiner's state comes from and goes to (the training loop's), set
  // before the first step; null where no node can join (solo, simulate).
  void SetLiveState(LiveState* live) { live_ = live; }
  // How this exchange moves between membership epochs (joins, re-forms,
  // resumes), which the training loop consults between steps. None for an
  // exchange without members to follow.
  virtual MembershipTransitions& Transitions() {
    static MembershipTransitions none;
    return none;
  }
  [[nodiscard]] virtual Status BeforeStep(int64_t step) { return Status::Ok(); }
  [[nodiscard]] virtual Status AfterBackward(int64_t step, int local_samples) {
    return Status::Ok();
  }
  [[nodiscard]] virtual Status AfterUpdate(int64_t step) { return Status::Ok(); }
  [[nodiscard]] virtual Status Finish() { return Status::Ok(); }
  // How a node's sample weight (W * b / B for a batch b of a global batch B
  // over W nodes: Trainer::SetSampleWeights) applies: an all-reduce weights the
  // gradients it averages; push-sum weights each node's update instead (under
  // LARS a step follows ||w|| / ||g||, so a gradient weight would cancel);
  // the other gossip protocols do not weight.
  enum class Weighting { kNone, kGradient, kUpdate };
  virtual Weighting SampleWeighting() const { return Weighting::kNone; }
  // Every member's batch share from the next step on, in rank order (the
  // members' batches, or load balancing's split of them): the most samples
  // each may claim in the contribution check, and under an outer optimizer
  // over every member each replica's weight in the outer step's mean (W * b /
  // B, so that every sample counts the same). Called whenever they change.
  virtual void SetMemberShares(const std::vector<int>& /*shares*/) {}
  // Every member's `mine`, in rank order: a collective of the current
  // membership that every member calls between the same steps (load
  // balancing's speeds). Empty when a member was lost on the way and the
  // exchange re-formed (as any failure: exchange.on_failure). Unimplemented
  // where the exchange has no collective.
  [[nodiscard]] virtual Result<std::vector<double>> GatherFromMembers(double /*mine*/) {
    return Err(Unimplemented(Describe() + " gathers no values"));
  }
  // What the exchange keeps beside the model that a node must carry on with
  // (an outer optimizer's outer parameters and velocity), by name: it travels
  // with the live state to a joiner and into checkpoints
  // (trainer::CheckpointInfo::exchange_state). Empty where there is none.
  virtual std::map<std::string, std::vector<float>> SavedState() const { return {}; }
  // Takes another member's (or a checkpoint's) SavedState, after the
  // trainer's state was restored; an error names what does not fit. A state
  // that lacks what the exchange keeps (a checkpoint of another exchange)
  // starts it afresh from the restored parameters.
  [[nodiscard]] virtual Status RestoreSavedState(const std::map<std::string, std::vector<float>>& /*state*/) {
    return Status::Ok();
  }
  // Fields merged into each metrics record (bytes sent/received, consensus distance...).
  virtual nlohmann::json Metrics() const { return nlohmann::json::object(); }

  // What ExactConsensusDistance returns where it does not measure.
  static constexpr double kNotMeasured = -1.0;
  // The exact relative consensus distance max_i ||x_i - x_mean|| / ||x_mean||
  // over the members' FP32 master weights after `step` steps
  // (gossip/protocols/consensus.h), the same value on every member, or
  // kNotMeasured. Where it measures it is a collective: every member calls it
  // after the same steps, which TrainingLoop::Evaluate does in a lockstep
  // gossip exchange (every member evaluates after the same steps). Not
  // measured: alone; under the pairwise-async protocol, whose nodes reach a
  // step at different times; after SetEvaluationsInLockstep(false). Under
  // all-reduce it is 0 by construction, returned without communicating. A
  // member lost during the measurement is no error here: the result is
  // kNotMeasured and the exchange's next step meets the failure.
  [[nodiscard]] virtual Result<double> ExactConsensusDistance(int64_t /*step*/) { return kNotMeasured; }
  // Where the members evaluate at their own steps (pairwise-async),
  // ExactConsensusDistance does not measure; at the evaluation that ends the
  // `epochs_done`-th epoch the loop calls this instead, and the exchange
  // starts the measurement keyed by it beside training
  // (background_consensus_meter.h). False where nothing started.
  virtual bool StartConsensusMeasurement(int64_t /*epochs_done*/) { return false; }
  // What StartConsensusMeasurement's measurements gave since the last call
  // (distance kNotMeasured where one failed); with `wait`, the one in
  // progress ends first.
  virtual std::vector<ConsensusMeasurement> TakeConsensusMeasurements(bool /*wait*/) { return {}; }
  // False where the members do not all evaluate after the same steps (a
  // simulation evaluates on a sample of its nodes): ExactConsensusDistance
  // then does not measure. True by default.
  void SetEvaluationsInLockstep(bool lockstep) { evaluations_in_lockstep_ = lockstep; }
  // True under a simulation's virtual clock (`chorus simulate`): work that
  // would overlap training on a helper thread runs on the node's thread, so
  // that no other thread moves the node's clock at a wall-clock moment (the
  // overlap is then not credited). False by default.
  void SetVirtualTime(bool virtual_time) { virtual_time_ = virtual_time; }

 protected:
  LiveState* live_ = nullptr;
  bool evaluations_in_lockstep_ = true;
  bool virtual_time_ = false;
};

// The tags of the collectives an exchange runs outside its protocol at
// Finish, in membership epoch `epoch`: FinishTagBase + k * kTagsPerCollective
// for k = 0..4 (k = 4: the site average before the representatives' last,
// with gossip inside sites; live_state.h lists every range of EpochTagBase's).
inline gossip::Tag FinishTagBase(uint64_t epoch) { return EpochTagBase(epoch) + (gossip::Tag{1} << 38); }

// The tags of a re-form's broadcasts of the trainer's state in membership
// epoch `epoch`: ResyncTagBase + k * kTagsPerCollective, four ranges for an
// all-reduce's state and six with an outer optimizer's (live_state.h lists
// every range of EpochTagBase's).
inline gossip::Tag ResyncTagBase(uint64_t epoch) { return EpochTagBase(epoch) + (gossip::Tag{1} << 39); }

// One node alone: no communication.
class SoloExchange final : public Exchange {
 public:
  std::string Describe() const override { return "none (single node)"; }
};

}  // namespace chorus::node
