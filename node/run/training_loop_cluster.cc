// The training loop's cluster steps (see training_loop.h): joining a running
// cluster and resuming, admission points, following the membership (shares,
// sample weights, the cluster's sample count) and load balancing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <numeric>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/fault_spec.h"
#include "common/log.h"
#include "node/control/sample_counter.h"
#include "node/exchange/trainer_state.h"
#include "node/run/training_loop.h"

namespace chorus::node {

Status TrainingLoop::Resume() {
  if (s_.session != nullptr && s_.session->joined_running) return JoinRunning();
  return ResumeFromCheckpoint();
}

// The cluster trains already: its state, from a member, replaces this node's
// (and any checkpoint: the cluster has moved on since it was written).
Status TrainingLoop::JoinRunning() {
  needs_live_state_ = true;
  const MembershipView& view = s_.session->view;
  CHORUS_LOG_INFO(Subsys::kNode, s_.node_name, " joined the running cluster at epoch ", view.epoch, " as rank ",
                  view.self_rank, " of ", view.size(), ": taking the live state from a member");
  if (s_.resume && std::filesystem::exists(s_.checkpoint_path)) {
    CHORUS_LOG_WARN(Subsys::kNode, "--resume: the cluster trains already; its live state replaces the checkpoint ",
                    s_.checkpoint_path);
  }
  CHORUS_RETURN_IF_ERROR(s_.exchange->Transitions().Joined());
  if (needs_live_state_) {
    return FailedPrecondition(s_.node_name + " joined the running cluster but received no state from its members");
  }
  steps_to_catch_up_ += s_.exchange->Transitions().TakeStepsToCatchUp();
  last_admission_step_ = step_;  // the members met at this step's admission point already
  return FollowMembership();
}

Result<std::vector<uint8_t>> TrainingLoop::Capture(int64_t next_step) {
  return trainer::CheckpointBytes(*s_.trainer, Position(next_step));
}

Status TrainingLoop::Restore(std::span<const uint8_t> bytes, const std::string& from) {
  CHORUS_ASSIGN_OR_RETURN(trainer::CheckpointInfo info, trainer::RestoreCheckpoint(bytes, from, s_.trainer));
  if (info.data_order.empty() || info.schedule_steps_per_epoch < 1) {
    return DataLoss(from + ": no data order or schedule in it");
  }
  CHORUS_RETURN_IF_ERROR(s_.exchange->RestoreSavedState(info.exchange_state).WithContext(from));
  CHORUS_RETURN_IF_ERROR(MergeSampleCounts(info, from));
  CHORUS_RETURN_IF_ERROR(s_.trainer->SetSchedule(info.schedule_steps_per_epoch, static_cast<int>(info.global_batch)));
  // Positioned as the sender: FollowMembership re-partitions for this node
  // (a node at its own pace keeps its own order over the data).
  if (!free_running_) {
    CHORUS_RETURN_IF_ERROR(sampler_->Restore(static_cast<int>(info.epoch), info.data_order, 0,
                                             static_cast<int>(info.partition_batches)));
    foreign_shard_ = true;
  }
  step_ = info.step;
  start_epoch_ = static_cast<int>(info.epoch);
  epoch_ = start_epoch_;
  positioned_ = true;
  needs_live_state_ = false;
  if (sample_record_ != nullptr) sample_record_->Restored(step_);
  return Status::Ok();
}

void TrainingLoop::PutBackStep() {
  if (!free_running_ && sampler_) sampler_->PutBack();
}

trainer::CheckpointInfo TrainingLoop::Position(int64_t next_step) const {
  trainer::CheckpointInfo info;
  info.step = next_step;
  info.epoch = epoch_;
  info.epoch_batches = sampler_->BatchesTaken();
  info.data_order = sampler_->History();
  info.partition_batches = sampler_->BatchesTakenInPartition();
  info.schedule_steps_per_epoch = s_.trainer->options().steps_per_epoch;
  info.global_batch = s_.trainer->options().global_batch;
  info.exchange_state = s_.exchange->SavedState();
  if (free_running_ && s_.session->control != nullptr) {
    info.sample_counts = SampleCounter::Encode(s_.session->control->SampleCounts());
  }
  return info;
}

Status TrainingLoop::MergeSampleCounts(const trainer::CheckpointInfo& info, const std::string& from) {
  if (!free_running_ || info.sample_counts.empty() || s_.session->control == nullptr) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(auto counts, SampleCounter::Decode(info.sample_counts, from));
  s_.session->control->MergeSampleCounts(counts);
  return Status::Ok();
}

// With --resume, the trainer's state from the checkpoint; then, in a cluster
// that stopped together, the step every member runs from.
Status TrainingLoop::ResumeFromCheckpoint() {
  if (!s_.resume) return Status::Ok();
  if (std::filesystem::exists(s_.checkpoint_path)) {
    CHORUS_ASSIGN_OR_RETURN(trainer::CheckpointInfo info, trainer::LoadCheckpoint(s_.checkpoint_path, s_.trainer));
    CHORUS_RETURN_IF_ERROR(s_.exchange->RestoreSavedState(info.exchange_state).WithContext(s_.checkpoint_path));
    start_epoch_ = static_cast<int>(info.epoch);
    epoch_ = start_epoch_;
    step_ = info.step;
    // At its own pace the cluster's sample counter comes back with the
    // checkpoint (merged with the other nodes' as they resume or heartbeat).
    // A checkpoint without one counts the epochs before this one as done (a
    // stop's partial epoch is trained again).
    CHORUS_RETURN_IF_ERROR(MergeSampleCounts(info, s_.checkpoint_path));
    if (free_running_ && info.sample_counts.empty()) {
      resumed_samples_ = static_cast<uint64_t>(start_epoch_) * static_cast<uint64_t>(s_.train->count);
    }
    if (info.epoch_batches > 0 && !free_running_) {
      // A checkpoint of a stop, mid-epoch: the sampler stands where it stood
      // (a checkpoint without a data order was taken over this membership:
      // the fresh sampler's one partition), as this node's shard when the
      // partition it was cut for splits this membership's global batch over
      // as many members (a balanced split stays, and the sample weights
      // follow it); otherwise (it had fewer or other members than resume
      // now) as rank 0's, and FollowMembership cuts this node's shard of
      // what is left.
      const std::string order = !info.data_order.empty() ? info.data_order : sampler_->History();
      const int in_partition = static_cast<int>(!info.data_order.empty() ? info.partition_batches : info.epoch_batches);
      CHORUS_RETURN_IF_ERROR(sampler_->Restore(start_epoch_, order, 0, in_partition));
      const bool same_split = sampler_->shares().size() == shares_.size() && sampler_->GlobalBatch() == GlobalBatch();
      foreign_shard_ = !same_split && ClusterView(s_.session) != nullptr;
      const int rank = std::min(SelfRank(), sampler_->world_size() - 1);
      if (!foreign_shard_ && rank > 0) {
        CHORUS_RETURN_IF_ERROR(sampler_->Restore(start_epoch_, order, rank, in_partition));
      }
      if (same_split) {
        const std::span<const int> cut = sampler_->shares();
        shares_.assign(cut.begin(), cut.end());
        ApplySampleWeights();
      }
      CHORUS_RETURN_IF_ERROR(FollowMembership());
      positioned_ = true;
    }
    // Epochs counted from 1, as the progress lines and a stop's message count them.
    if (info.epoch_batches > 0) {
      CHORUS_LOG_INFO(Subsys::kNode, "resumed from ", s_.checkpoint_path, " in epoch ", start_epoch_ + 1, ", step ",
                      info.step, ", ", info.epoch_batches, " batches into the epoch");
    } else {
      CHORUS_LOG_INFO(Subsys::kNode, "resumed from ", s_.checkpoint_path, " after epoch ", start_epoch_, ", step ",
                      info.step);
    }
  } else {
    CHORUS_LOG_WARN(Subsys::kNode, "--resume: no checkpoint at ", s_.checkpoint_path, "; starting from scratch");
  }
  const MembershipView* view = ClusterView(s_.session);
  if (view != nullptr && view->epoch == 0) {
    // The founding nodes may have stopped steps apart (gossip, or a node
    // stopped alone): run from one step.
    // A node behind the others takes a member's live state (Restore) there.
    CHORUS_RETURN_IF_ERROR(s_.exchange->Transitions().Resumed(step_ + steps_to_catch_up_));
    steps_to_catch_up_ += s_.exchange->Transitions().TakeStepsToCatchUp();
    CHORUS_RETURN_IF_ERROR(FollowMembership());
    // Every member runs on from one step: the first admission point is the
    // same for all. FollowMembership sets it only for a node whose shard it
    // cuts again, and a node resumed from an epoch's end keeps its shard: it
    // met the others at the resume step, where a node that took the live
    // state did not come (each waited for the other until a timeout).
    next_admission_step_ = step_ + steps_to_catch_up_ + s_.config->cluster.admit_every_steps;
  }
  return Status::Ok();
}

namespace {

// The members of the installed view that the control plane's latest view no
// longer has, by name ("node2, node5"); empty when none (or no newer view).
std::string LostMembers(ClusterSession& session) {
  if (session.control->Epoch() <= session.view.epoch) return "";
  const MembershipView latest = session.control->View();
  std::string lost;
  for (const Member& m : session.view.members) {
    const Member* now = latest.Find(m.name);
    if (now == nullptr || now->data_address != m.data_address) lost += (lost.empty() ? "" : ", ") + m.name;
  }
  return lost;
}

// Fault injection for tests (docs/testing.md): CHORUS_FAULT_HOLD_ADMISSION_S
// seconds of waiting at the node's first admission point after step 0
// (before step `step`) before it looks at the membership, as a loaded host
// may wait there: the control plane can install a newer view meanwhile.
void HoldAtFirstAdmissionIfAsked(int64_t step) {
  static bool held = false;
  const char* text = std::getenv("CHORUS_FAULT_HOLD_ADMISSION_S");
  if (held || text == nullptr || step == 0) return;
  held = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, std::atof(text))));
}

// Fault injection for tests (docs/testing.md): CHORUS_FAULT_ACCUSE=NAME@STEP
// makes this node ask the cluster to expel NAME at its admission points from
// step STEP on, though NAME sent nothing wrong: a lying member.
void AccuseIfAsked(ControlPlane& control, int64_t step) {
  static const std::optional<NameAtStep> fault = ParseNameAtStep(std::getenv("CHORUS_FAULT_ACCUSE"));
  if (!fault || step < fault->step) return;
  control.Expel(fault->name, "fault injection: a lying member (CHORUS_FAULT_ACCUSE)");
}

}  // namespace

// Admission points: the members agree at each on the next one (the largest
// step any proposes), so they meet at the same steps whatever their clocks.
// A node proposes the step after about cluster.admit_every_s seconds of its
// own steps, at least cluster.admit_every_steps ahead. After a membership
// change every member is at one step (the admission's, or the step a re-form
// agreed on) and the next point is admit_every_steps after it
// (FollowMembership).
Status TrainingLoop::AdmitIfDue() {
  ClusterSession* session = s_.session;
  const ClusterConfig& cc = s_.config->cluster;
  if (session == nullptr || session->control == nullptr) return Status::Ok();
  if (free_running_) return FollowViewOnItsOwn();
  if (cc.admit_every_steps <= 0 || steps_to_catch_up_ > 0) return Status::Ok();
  if (step_ < next_admission_step_ || step_ == last_admission_step_) return Status::Ok();
  const double now = NowSeconds();
  int64_t ahead = cc.admit_every_steps;
  if (cc.admit_every_s > 0 && step_ > rate_since_step_) {
    const double per_step = (now - rate_since_time_) / static_cast<double>(step_ - rate_since_step_);
    if (per_step > 0) ahead = std::max<int64_t>(ahead, std::llround(cc.admit_every_s / per_step));
  }
  last_admission_step_ = step_;
  rate_since_step_ = step_;
  rate_since_time_ = now;
  const uint64_t epoch = session->view.epoch;
  HoldAtFirstAdmissionIfAsked(step_);
  AccuseIfAsked(*session->control, step_);
  if (const std::string lost = LostMembers(*session); !lost.empty()) {
    CHORUS_LOG_INFO(Subsys::kNode, "admission point before step ", step_, ": ", lost,
                    " left; meeting the members that re-form");
    CHORUS_RETURN_IF_ERROR(s_.exchange->Transitions().MembersLost(step_));
    steps_to_catch_up_ += s_.exchange->Transitions().TakeStepsToCatchUp();
    if (session->view.epoch != epoch) return FollowMembership();
  }
  int64_t agreed = -1;
  Result<MembershipView> next = session->control->AdvanceEpochIfPending(
      Deadline::AfterSeconds(s_.config->fabric.op_timeout_s), step_ + ahead, &agreed);
  next_admission_step_ = agreed > step_ ? agreed : step_ + cc.admit_every_steps;
  session->control->ReportProgress(step_, next_admission_step_);  // the coordinator tells joiners
  return AdmitInto(next, epoch);
}

// Nodes whose steps run apart cannot meet at a step, and never wait for each
// other: the coordinator admits joiners by itself (ControlPlane::AdmitOnItsOwn)
// and each node follows the newer view between its steps (its operations of
// the older epoch end as soon as the control plane installs the view).
Status TrainingLoop::FollowViewOnItsOwn() {
  ClusterSession* session = s_.session;
  if (session->control == nullptr) return Status::Ok();  // the simulator's: one view
  if (session->control->Epoch() <= session->view.epoch) return Status::Ok();  // every step: no copy
  const MembershipView latest = session->control->View();
  if (latest.epoch <= session->view.epoch || latest.self_rank < 0) return Status::Ok();
  return AdmitInto(latest, session->view.epoch);
}

// The members met at an admission point (of `epoch`) and `met` is the view
// after it, or the error of a member lost on the way: then the exchange's
// next operation meets the failure and re-forms.
Status TrainingLoop::AdmitInto(const Result<MembershipView>& met, uint64_t epoch) {
  if (!met) {
    CHORUS_LOG_INFO(Subsys::kNode, "admission point before step ", step_, ": ", met.error().message());
    return Status::Ok();
  }
  const MembershipView& next = *met;
  // At its own pace a node follows every view so (no member meets it in a re-form).
  if (next.epoch <= epoch || (next.joined.empty() && !free_running_)) return Status::Ok();
  // "admitting <joiners>", or at its own pace for a view without joiners "following epoch <e>".
  const std::string what = next.joined.empty() ? "epoch " + std::to_string(next.epoch) : JoinNames(next.joined);
  const char* doing = next.joined.empty() ? "following " : "admitting ";
  CHORUS_LOG_INFO(Subsys::kNode, doing, what, " before step ", step_, " (epoch ", next.epoch, ", ", next.size(),
                  " members)");
  const double t0 = NowSeconds();
  CHORUS_RETURN_IF_ERROR(s_.exchange->Transitions().Admit(next, step_));
  steps_to_catch_up_ += s_.exchange->Transitions().TakeStepsToCatchUp();
  CHORUS_LOG_INFO(Subsys::kNode, next.joined.empty() ? "followed " : "admitted ", what, " in ", NowSeconds() - t0,
                  " s");
  if (s_.trace != nullptr) {
    s_.trace->Add("admission", 1, static_cast<int64_t>(t0 * 1e6), static_cast<int64_t>(NowSeconds() * 1e6), step_);
  }
  return FollowMembership();
}

Status TrainingLoop::FollowMembership() {
  if (s_.session == nullptr || steps_to_catch_up_ > 0) return Status::Ok();
  const MembershipView& view = s_.session->view;
  const uint64_t followed = free_running_ ? followed_epoch_ : sampler_->partition();
  if (view.self_rank < 0 || (followed == view.epoch && !foreign_shard_)) return Status::Ok();
  followed_epoch_ = view.epoch;
  foreign_shard_ = false;
  const int taken = sampler_->BatchesTakenInPartition();
  shares_ = MemberBatches();
  if (!free_running_) CHORUS_RETURN_IF_ERROR(sampler_->Repartition(view.self_rank, shares_, view.epoch));
  ApplySampleWeights();
  // Every member is at this step now: the next admission point is the same for all.
  next_admission_step_ = step_ + s_.config->cluster.admit_every_steps;
  rate_since_step_ = step_;
  rate_since_time_ = NowSeconds();
  balance_ = BalanceWindow{};
  CHORUS_RETURN_IF_ERROR(s_.trainer->SetSchedule(s_.trainer->options().steps_per_epoch, GlobalBatch()));
  if (free_running_) {
    CHORUS_LOG_INFO(Subsys::kNode, "membership of ", view.size(), " members: global batch ", GlobalBatch());
    return Status::Ok();
  }
  CHORUS_LOG_INFO(Subsys::kNode, "epoch ", epoch_ + 1, ": the rest of the data (after ", taken,
                  " batches) re-partitioned over ", view.size(), " members: ",
                  sampler_->BatchesPerEpoch() - sampler_->BatchesTaken(), " batches left for this node; global batch ",
                  GlobalBatch());
  return Status::Ok();
}

std::vector<int> TrainingLoop::MemberBatches() const {
  std::vector<int> batches;
  if (ClusterView(s_.session) != nullptr) {
    for (const Member& m : s_.session->view.members) batches.push_back(m.batch_size);
    return batches;
  }
  if (!s_.batch_sizes.empty()) return s_.batch_sizes;
  return std::vector<int>(static_cast<size_t>(std::max(1, s_.world_size)), s_.config->train.batch_size);
}

int TrainingLoop::GlobalBatch() const { return std::accumulate(shares_.begin(), shares_.end(), 0); }

int TrainingLoop::SelfRank() const {
  return ClusterView(s_.session) != nullptr ? s_.session->view.self_rank : s_.rank;
}

void TrainingLoop::ApplySampleWeights() {
  const int own = free_running_ ? s_.config->train.batch_size : shares_[static_cast<size_t>(SelfRank())];
  node::ApplySampleWeights(s_.exchange->SampleWeighting(), *s_.trainer, shares_, own);
  if (!free_running_) s_.exchange->SetMemberShares(shares_);
}

uint64_t TrainingLoop::ClusterSamples(bool estimate) const {
  if (!free_running_) return static_cast<uint64_t>(samples_done_);
  if (s_.cluster_samples) return s_.cluster_samples(static_cast<uint64_t>(samples_done_)) + resumed_samples_;
  const ControlPlane& control = *s_.session->control;
  return (estimate ? control.ClusterSamplesEstimate() : control.ClusterSamples()) + resumed_samples_;
}

int64_t BalanceInterval(const Config& config) {
  const int64_t every = std::max(1, config.train.balance_every_steps);
  if (config.exchange.outer.optimizer == OuterOptimizer::kNone) return every;
  const int64_t period = std::max(1, config.exchange.outer.period);
  return (every + period - 1) / period * period;
}

bool BalanceDue(const Config& config, int64_t step) {
  const int64_t interval = BalanceInterval(config);
  const OuterConfig& outer = config.exchange.outer;
  const int64_t offset = outer.optimizer == OuterOptimizer::kNone ? 0 : std::max(0, outer.delay);
  return step >= interval && (step - offset) % interval == 0;
}

// Every BalanceInterval steps the members gather their speeds (samples per
// second of compute, emulated slowness included) and split the global batch
// in proportion: every member computes the same split from the same gathered
// values. The rest of the epoch is re-partitioned by it.
Status TrainingLoop::BalanceIfDue() {
  const TrainConfig& tc = s_.config->train;
  if (tc.balance != BalanceSetting::kTime || shares_.size() < 2 || steps_to_catch_up_ > 0 ||
      !BalanceDue(*s_.config, step_)) {
    return Status::Ok();
  }
  // A member that trained no step since the last split sends 0: then nobody re-splits.
  const double speed = balance_.seconds > 0 ? static_cast<double>(balance_.samples) / balance_.seconds : 0.0;
  balance_ = BalanceWindow{};
  CHORUS_ASSIGN_OR_RETURN(std::vector<double> speeds, s_.exchange->GatherFromMembers(speed));
  if (speeds.size() != shares_.size()) return Status::Ok();  // re-formed meanwhile: FollowMembership re-cuts
  std::vector<int> split = SplitBySpeed(GlobalBatch(), speeds);
  if (split.empty() || split == shares_) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(sampler_->Repartition(SelfRank(), split, sampler_->partition()));
  shares_ = std::move(split);
  ApplySampleWeights();
  CHORUS_LOG_DEBUG(Subsys::kNode, "step ", step_, ": global batch split by speed: ", sampler_->History());
  return Status::Ok();
}

std::vector<int> SplitBySpeed(int global_batch, const std::vector<double>& speeds) {
  const size_t n = speeds.size();
  double total = 0.0;
  for (double s : speeds) {
    if (!(s > 0.0) || !std::isfinite(s)) return {};
    total += s;
  }
  if (n == 0 || global_batch < static_cast<int>(n)) return {};
  // Each member at least one sample; the rest by largest remainder, ties to
  // the lower rank, so that every member computes the same split.
  const int spare = global_batch - static_cast<int>(n);
  std::vector<int> split(n, 1);
  std::vector<std::pair<double, size_t>> remainders;
  int given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = spare * speeds[i] / total;
    const int whole = static_cast<int>(std::floor(exact));
    split[i] += whole;
    given += whole;
    remainders.push_back({exact - whole, i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int k = 0; k < spare - given; ++k) ++split[remainders[static_cast<size_t>(k) % n].second];
  return split;
}

}  // namespace chorus::node
