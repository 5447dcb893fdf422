// The one training loop (see training_loop.h).
#include "node/run/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/log.h"
#include "node/config/config_check.h"

namespace chorus::node {
namespace {

using nlohmann::json;

// Evaluation batches: large enough to amortise the pass, small enough for any model.
constexpr int kEvalBatch = 256;

// How long a signalled node waits for the others at a step's stop barrier.
// Under all-reduce the nodes reach a step's start within one update of each
// other (the previous step's sums end together), far less than this; a node
// signalled alone waits twice this before it stops.
constexpr double kStopAgreementSeconds = 0.5;

// Fault injection for tests (docs/testing.md): CHORUS_FAULT_STALL=STEP:SECONDS
// holds the training thread SECONDS after step STEP's forward and backward,
// before its exchange (once), while the control plane keeps answering: a
// node whose training stalls (swapping, a driver that hangs a while) but
// whose process lives.
void StallIfAsked(int64_t step) {
  static bool stalled = false;
  const char* text = std::getenv("CHORUS_FAULT_STALL");
  if (stalled || text == nullptr) return;
  const char* colon = std::strchr(text, ':');
  if (colon == nullptr || std::atoll(text) != step) return;
  stalled = true;
  CHORUS_LOG_WARN(Subsys::kNode, "fault injection: the training thread stalls for ", colon + 1, " s at step ", step);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, std::atof(colon + 1))));
}

}  // namespace

const MembershipView* ClusterView(const ClusterSession* session) {
  return session != nullptr && session->view.size() >= 2 ? &session->view : nullptr;
}

Pacing PacingOf(const Config& config, Exchange& exchange, const ClusterSession* session, bool own_sample_counter) {
  const bool clustered = session != nullptr && (session->control != nullptr || own_sample_counter);
  const bool apart = exchange.Transitions().StepsRunApart();
  return clustered && config.train.stop == StopSetting::kSamples && apart ? Pacing::kOwnPace : Pacing::kLockstep;
}

double WallClock::Now() { return NowSeconds(); }

void WallClock::ComputeStarts(int /*samples*/) {
  if (slowdown_ > 0.0) cpu_at_start_ = ProcessCpuSeconds();
}

void WallClock::ComputeEnded(double measured_s) {
  compute_seconds_ += measured_s;
  if (slowdown_ <= 0.0) return;
  const double worked = 4.0 * std::max(0.0, ProcessCpuSeconds() - cpu_at_start_);
  std::this_thread::sleep_for(std::chrono::duration<double>(slowdown_ * std::min(measured_s, worked)));
}

Result<int64_t> ClusterStepsPerEpoch(const Config& config, int train_images, int global_batch) {
  if (global_batch < 1 || train_images / global_batch < 1) {
    return Err(InvalidArgument(SettingOrigin(config, "train.batch_size") + ": train.batch_size: the global batch of " +
                               std::to_string(global_batch) + " (the members' batches summed) is larger than the " +
                               std::to_string(train_images) + " training images: it would train no step"));
  }
  return train_images / global_batch;
}

Result<std::optional<json>> TrainingLoop::Run() {
  const TrainConfig& tc = s_.config->train;
  free_running_ =
      PacingOf(*s_.config, *s_.exchange, s_.session, static_cast<bool>(s_.cluster_samples)) == Pacing::kOwnPace;
  if (free_running_) {
    // No barrier: joiners are admitted by the coordinator alone, until the
    // run's budget is near, and every view is followed between steps.
    if (s_.config->cluster.admit_every_steps > 0 && s_.session->control != nullptr) {
      s_.session->control->AdmitOnItsOwn(static_cast<uint64_t>(tc.epochs) * static_cast<uint64_t>(s_.train->count));
    }
    s_.session->SetOwnPace();
  }
  shares_ = MemberBatches();
  const int rank = SelfRank();
  CHORUS_RETURN_IF_ERROR(StatusOf(ClusterStepsPerEpoch(*s_.config, s_.train->count, GlobalBatch())));
  const uint64_t partition = s_.session != nullptr ? s_.session->view.epoch : 0;
  followed_epoch_ = partition;
  // A node that trains at its own pace passes over the whole training set in
  // its own order (seeded by its rank): it never runs out of data, and nodes
  // at different passes do not train the same batches together.
  Result<trainer::BatchSampler> sampler =
      free_running_ ? trainer::BatchSampler::Create(s_.train->count, tc.batch_size,
                                                    tc.seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank + 1), 0, 1)
                    : trainer::BatchSampler::Create(s_.train->count, shares_, tc.seed, rank, /*drop_last=*/true,
                                                    partition);
  if (!sampler) return Err(sampler.error());
  sampler_.emplace(std::move(*sampler));
  ApplySampleWeights();
  if (!free_running_) sample_record_ = SampleRecord::FromEnvironment(s_.node_name);
  s_.exchange->SetLiveState(this);
  CHORUS_RETURN_IF_ERROR(Resume());
  rate_since_step_ = step_;
  rate_since_time_ = NowSeconds();
  if (s_.session != nullptr && s_.session->control != nullptr) s_.session->control->ReportProgress(step_, step_);

  t_start_ = s_.clock->Now();
  trainer::Batch batch;
  for (epoch_ = start_epoch_; epoch_ < tc.epochs; ++epoch_) {
    const int epoch = epoch_;
    if (!std::exchange(positioned_, false) && !free_running_) sampler_->StartEpoch(epoch);
    window_ = Window{s_.clock->Now()};
    while (true) {
      if (StopsBefore()) break;
      CHORUS_RETURN_IF_ERROR(WithTheCluster());
      // A re-form (in a step or above) may have taken a member's state: in
      // another epoch, the loop goes on there; in this one, it stands in it.
      if (epoch_ != epoch) break;
      positioned_ = false;
      CHORUS_RETURN_IF_ERROR(FollowMembership());
      if (!NextBatch(&batch)) break;
      trainer::ForwardBackwardResult pass;
      trainer::UpdateResult update;
      bool abandoned = false;
      if (steps_to_catch_up_ > 0) {  // behind the survivors of a re-form: a step of its own
        --steps_to_catch_up_;
        CHORUS_RETURN_IF_ERROR(CatchUpStep(batch, &pass, &update));
      } else {
        CHORUS_RETURN_IF_ERROR(TrainStep(batch, &pass, &update, &abandoned));
      }
      if (abandoned) continue;
      CHORUS_RETURN_IF_ERROR(AfterStep(epoch, pass, update));
    }
    if (epoch_ != epoch) {  // go on in the taken state's epoch, where it stands
      positioned_ = true;
      --epoch_;
      continue;
    }
    if (s_.progress != nullptr) s_.progress->Finish();
    if (stopped_by_ != 0) {
      CHORUS_RETURN_IF_ERROR(StopWithCheckpoint(epoch, sampler_->BatchesTaken()));
      return std::optional<json>();
    }
    CHORUS_RETURN_IF_ERROR(EndEpoch(epoch));
  }
  CHORUS_ASSIGN_OR_RETURN(json summary, Summarise());
  return std::optional<json>(std::move(summary));
}

Status TrainingLoop::WithTheCluster() {
  if (s_.session != nullptr && s_.session->control != nullptr) {
    CHORUS_RETURN_IF_ERROR(s_.session->control->Failure());  // removed, or its part yielded
  }
  CHORUS_RETURN_IF_ERROR(FollowMembership());
  CHORUS_RETURN_IF_ERROR(AdmitIfDue());
  return BalanceIfDue();
}

Status TrainingLoop::AfterStep(int epoch, const trainer::ForwardBackwardResult& pass,
                               const trainer::UpdateResult& update) {
  samples_done_ += pass.samples;
  if (s_.session != nullptr && s_.session->control != nullptr) {
    s_.session->control->ReportSamples(static_cast<uint64_t>(samples_done_));
  }
  last_loss_ = pass.loss;
  window_.samples += pass.samples;
  window_.loss += pass.loss;
  ++window_.steps;
  ShowProgress(epoch, sampler_->BatchesTaken() - 1, pass);
  const bool epoch_end = EpochDone();
  if (step_ % s_.log_every == 0 || (epoch_end && s_.record_epoch_ends)) {
    CHORUS_RETURN_IF_ERROR(RecordWindow(epoch, epoch_end, update));
  }
  return EvaluateIfDue(epoch, epoch_end);
}

bool TrainingLoop::NextBatch(trainer::Batch* batch) {
  const trainer::BatchContents contents = s_.trainer->ContentsFor(*s_.train);
  bool drawn = false;
  if (!free_running_) {
    drawn = sampler_->Next(*s_.train, batch, contents);
  } else if (!EpochDone()) {
    drawn = sampler_->Next(*s_.train, batch, contents);
    if (!drawn) {
      sampler_->StartEpoch(sampler_->epoch() + 1);  // this node's next pass over the data
      drawn = sampler_->Next(*s_.train, batch, contents);
    }
  }
  if (drawn) trainer::AugmentBatch(AugmentOptionsOf(*s_.config), sampler_->epoch(), batch);
  return drawn;
}

trainer::AugmentOptions AugmentOptionsOf(const Config& config) {
  trainer::AugmentOptions o;
  o.flip = config.data.augment_flip;
  o.shift = config.data.augment_shift;
  o.seed = config.train.seed;
  o.fill = trainer::BlankPixel();
  return o;
}

bool TrainingLoop::EpochDone() const {
  if (!free_running_) return sampler_->BatchesTaken() >= sampler_->BatchesPerEpoch();
  return ClusterSamples() >= static_cast<uint64_t>(epoch_ + 1) * static_cast<uint64_t>(s_.train->count);
}

double TrainingLoop::SchedulePosition() const {
  // The schedule counts global samples: its epochs hold steps_per_epoch steps
  // of the first membership's global batch. Where the cluster trains at its
  // own pace, the fraction is the cluster's samples over the budget; else the
  // fraction of this epoch's samples taken before this step (equal on every
  // member), which is the step count when nothing changed.
  const int64_t spe = s_.trainer->options().steps_per_epoch;
  if (free_running_) {
    return static_cast<double>(ClusterSamples(/*estimate=*/true)) /
           static_cast<double>(std::max(1, s_.train->count)) * static_cast<double>(spe);
  }
  return SchedulePositionOf(*sampler_, epoch_, spe);
}

double SchedulePositionOf(const trainer::BatchSampler& sampler, int epoch, int64_t steps_per_epoch) {
  const int64_t in_epoch = sampler.BatchesPerEpoch();
  const int64_t done = std::max(0, sampler.BatchesTaken() - 1);
  const int64_t epoch_start = static_cast<int64_t>(epoch) * steps_per_epoch;
  if (in_epoch < 1) return static_cast<double>(epoch_start);
  if (in_epoch == steps_per_epoch && !sampler.Repartitioned()) {
    return static_cast<double>(epoch_start + done);  // exact where nothing changed
  }
  const int64_t before = std::max<int64_t>(0, sampler.SamplesTaken() - sampler.GlobalBatch());
  return static_cast<double>(epoch_start) + static_cast<double>(before) /
                                                static_cast<double>(sampler.SamplesPerEpoch()) *
                                                static_cast<double>(steps_per_epoch);
}

// Whether a stop signal ends the loop before step_ (true: stopped_by_ is
// set). Not while catching up: skipped steps take no time, and the others
// wait at the first step this node trains. Under an exchange in lockstep the
// members of a cluster stop before the same step, so that their checkpoints
// agree and --resume trains every batch: they meet at the control-plane
// barrier "chorus.stop.<step>", which completes when every member got a
// signal too (Ctrl-C on a launch) and reached the step. It times out when a
// member began the step before its signal came (it waits in that step's
// all-reduce for this node): train the step with it and meet at the next one.
// A second timeout means the others got no signal (a SIGTERM to this node
// alone): it stops alone, leaving, and they re-form without it.
bool TrainingLoop::StopsBefore() {
  const int signal = s_.stop != nullptr ? s_.stop->requested() : 0;
  if (signal == 0 || steps_to_catch_up_ > 0) return false;
  const MembershipView* view = ClusterView(s_.session);
  if (view != nullptr && s_.session->control != nullptr && s_.exchange->Transitions().StepsInLockstep()) {
    const Status met = s_.session->control->Barrier("chorus.stop." + std::to_string(step_), view->epoch,
                                                    Deadline::AfterSeconds(kStopAgreementSeconds));
    if (!met.ok() && met.code() == StatusCode::kDeadlineExceeded && ++stop_timeouts_ < 2) {
      CHORUS_LOG_INFO(Subsys::kNode, "stop before step ", step_, " not agreed (", met.message(),
                      "): training it, then stopping with the others");
      return false;
    }
    if (!met.ok()) {
      CHORUS_LOG_WARN(Subsys::kNode, "stopping before step ", step_, " without the others (", met.message(),
                      "): they go on without this node");
    }
  }
  stopped_by_ = signal;
  return true;
}

// The exchange's hooks around the trainer's pass and update (exchange.h). An
// update abandoned in a re-form is not applied: the replicas were
// re-synchronised instead (and the step is not counted as done).
Status TrainingLoop::TrainStep(const trainer::Batch& batch, trainer::ForwardBackwardResult* pass,
                               trainer::UpdateResult* update, bool* abandoned) {
  CHORUS_RETURN_IF_ERROR(ForwardBackward(batch, /*with_exchange=*/true, pass));
  StallIfAsked(step_);
  CHORUS_RETURN_IF_ERROR(s_.exchange->AfterBackward(step_, pass->samples));
  *abandoned = s_.exchange->Transitions().TakeStepAbandoned();
  if (*abandoned) {
    // The re-form put the batch back (PutBackStep) or took a member's state,
    // whose step is the one to run next.
    if (sample_record_ != nullptr) sample_record_->Drop();
    return Status::Ok();
  }
  if (sample_record_ != nullptr) sample_record_->Commit();
  s_.clock->UpdateStarts();
  CHORUS_ASSIGN_OR_RETURN(*update, s_.trainer->ApplyUpdate(step_, SchedulePosition()));
  CHORUS_RETURN_IF_ERROR(s_.exchange->AfterUpdate(step_));
  steps_to_catch_up_ += s_.exchange->Transitions().TakeStepsToCatchUp();  // a re-form in the gossip after the update
  ++step_;
  if (s_.after_step) s_.after_step(step_, s_.trainer->MasterWeights());
  return Status::Ok();
}

// A step without the exchange: a node behind the others after a re-form
// (gossip, DiLoCo: they resume from the largest step any survivor reached)
// trains the batches of the steps it missed, as local steps, rather than
// drop them; the exchange meets it again at the agreed step.
Status TrainingLoop::CatchUpStep(const trainer::Batch& batch, trainer::ForwardBackwardResult* pass,
                                 trainer::UpdateResult* update) {
  CHORUS_RETURN_IF_ERROR(ForwardBackward(batch, /*with_exchange=*/false, pass));
  if (sample_record_ != nullptr) sample_record_->Commit();
  s_.clock->UpdateStarts();
  CHORUS_ASSIGN_OR_RETURN(*update, s_.trainer->ApplyUpdate(step_, SchedulePosition()));
  ++step_;
  return Status::Ok();
}

// The compute of a step on the node's clock (a virtual clock moves by it at
// ComputeStarts), counted for the load balancer; with the exchange, its
// BeforeStep hook first and a trace span.
Status TrainingLoop::ForwardBackward(const trainer::Batch& batch, bool with_exchange,
                                     trainer::ForwardBackwardResult* pass) {
  const double clock0 = s_.clock->Now();
  s_.clock->ComputeStarts(batch.size);
  const double t0 = NowSeconds();
  if (sample_record_ != nullptr) {  // before backward, where the gradient starts to leave
    const uint64_t membership = s_.session != nullptr ? s_.session->view.epoch : 0;
    sample_record_->Pending(epoch_, membership, step_, sampler_->LastBatch());
  }
  if (with_exchange) CHORUS_RETURN_IF_ERROR(s_.exchange->BeforeStep(step_));
  CHORUS_ASSIGN_OR_RETURN(*pass, s_.trainer->ForwardBackward(batch));
  const double t_compute = NowSeconds() - t0;
  if (with_exchange && s_.trace != nullptr) {
    s_.trace->Add("forward+backward", 0, static_cast<int64_t>(t0 * 1e6),
                  static_cast<int64_t>((t0 + t_compute) * 1e6), step_);
  }
  s_.clock->ComputeEnded(t_compute);
  balance_.seconds += s_.clock->Now() - clock0;  // slowness included
  balance_.samples += pass->samples;
  return Status::Ok();
}

void TrainingLoop::ShowProgress(int epoch, int64_t i, const trainer::ForwardBackwardResult& pass) {
  if (s_.progress == nullptr) return;
  const double now = s_.clock->Now();
  ProgressUpdate update;
  update.epoch = epoch + 1;
  update.epochs = s_.config->train.epochs;
  update.step = i + 1;
  update.steps_per_epoch = sampler_->BatchesPerEpoch();
  update.loss = pass.loss;
  update.samples_per_s = window_.samples / std::max(1e-9, now - window_.start);
  update.elapsed_s = now - t_start_;
  s_.progress->Update(update);
}

json TrainingLoop::BaseRecord(int epoch) const {
  json r = s_.exchange->Metrics();
  const double now = s_.clock->Now();
  const trainer::Trainer& trainer = *s_.trainer;
  r["step"] = step_;
  r["epoch"] = epoch;
  // From the epoch in progress, not `epoch`: a record at an epoch's end
  // counts that epoch as done in `epoch`, and its batches are all taken.
  r["epoch_progress"] = free_running_ ? static_cast<double>(ClusterSamples()) / std::max(1, s_.train->count)
                                     : epoch_ + static_cast<double>(sampler_->BatchesTaken()) /
                                                    static_cast<double>(std::max(1, sampler_->BatchesPerEpoch()));
  r["time"] = now - t_start_ - eval_seconds_;
  r["wall_time"] = now - t_start_;
  r["lr"] = trainer.LearningRate(SchedulePosition());
  r["loss_scale"] = trainer.loss_scaler().scale();
  r["skipped_steps"] = trainer.loss_scaler().skipped_steps();
  r["samples"] = samples_done_;
  if (free_running_) r["cluster_samples"] = ClusterSamples();
  return r;
}

// The steps since the last record: mean loss, this step's lr and loss scale,
// samples/s. A record at an epoch's last step counts that epoch as done.
Status TrainingLoop::RecordWindow(int epoch, bool epoch_end, const trainer::UpdateResult& update) {
  CHORUS_RETURN_IF_ERROR(AppendConsensusMeasurements(/*wait=*/false));
  json r = BaseRecord(epoch_end ? epoch + 1 : epoch);
  const double now = s_.clock->Now();
  r["loss"] = window_.loss / static_cast<double>(std::max<int64_t>(1, window_.steps));
  r["lr"] = update.lr;
  r["loss_scale"] = update.loss_scale;
  r["samples_per_s"] = now > window_.start ? window_.samples / (now - window_.start) : 0.0;
  // Equal on every node after every step under all-reduce (tests compare it).
  if (s_.checksum_in_records) r["parameter_checksum"] = std::to_string(s_.trainer->ParameterChecksum());
  CHORUS_RETURN_IF_ERROR(s_.metrics->Append(r));
  window_ = Window{now};
  return Status::Ok();
}

Status TrainingLoop::EvaluateIfDue(int epoch, bool epoch_end) {
  const EvalPlan& plan = s_.evals;
  bool due = plan.every_steps > 0 && step_ % plan.every_steps == 0 && !epoch_end;
  while (next_at_step_ < plan.at_steps.size() && plan.at_steps[next_at_step_] < step_) ++next_at_step_;
  if (next_at_step_ < plan.at_steps.size() && plan.at_steps[next_at_step_] == step_) {
    due = true;
    ++next_at_step_;
  }
  if (!due) return Status::Ok();
  return Evaluate(*plan.step_set, epoch_end ? epoch + 1 : epoch, /*whole_test_set=*/false);
}

// One evaluation and its record, with the exact consensus distance where the
// exchange measures it (a collective at the steps every member evaluates
// after). Their time is kept out of the records' `time` (eval_seconds_), so
// curves show training time.
Status TrainingLoop::Evaluate(const trainer::Dataset& set, int epoch, bool whole_test_set) {
  const double e0 = s_.clock->Now();
  CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult eval, s_.trainer->Evaluate(set, kEvalBatch));
  double distance = Exchange::kNotMeasured;
  if (s_.exact_distance) {
    distance = std::max(Exchange::kNotMeasured, s_.exact_distance(step_));
  } else {
    CHORUS_ASSIGN_OR_RETURN(distance, s_.exchange->ExactConsensusDistance(step_));
  }
  const bool measuring = distance == Exchange::kNotMeasured && whole_test_set && !s_.exact_distance &&
                         s_.exchange->StartConsensusMeasurement(epoch);
  eval_seconds_ += s_.clock->Now() - e0;
  json r = BaseRecord(epoch);
  if (measuring) {
    // The measurement's own record, written when it ends, from this moment's.
    json c = r;
    c.erase("consensus_distance_estimate");  // the window records carry it
    consensus_records_[epoch] = std::move(c);
  }
  r["eval_accuracy"] = eval.accuracy;
  r["eval_loss"] = eval.loss;
  r["eval_samples"] = set.count;
  if (distance != Exchange::kNotMeasured) r["consensus_distance_exact"] = distance;
  r["loss"] = last_loss_;
  CHORUS_RETURN_IF_ERROR(s_.metrics->Append(r));
  if (whole_test_set) {
    CHORUS_LOG_INFO(Subsys::kTrainer, "epoch ", epoch, "/", s_.config->train.epochs, ": test accuracy ",
                    eval.accuracy, ", test loss ", eval.loss, ", ",
                    samples_done_ / std::max(1e-9, s_.clock->Now() - t_start_), " samples/s");
  }
  return Status::Ok();
}

// Where this node stands, for --resume: the trainer's state after step_
// steps, `i` batches into `epoch`.
Status TrainingLoop::StopWithCheckpoint(int epoch, int64_t i) {
  if (!s_.checkpoint_path.empty()) {
    CHORUS_RETURN_IF_ERROR(trainer::SaveCheckpoint(*s_.trainer, Position(step_), s_.checkpoint_path));
  }
  json r = BaseRecord(epoch);
  r["stopped"] = SignalName(stopped_by_);
  r["parameter_checksum"] = std::to_string(s_.trainer->ParameterChecksum());
  CHORUS_RETURN_IF_ERROR(s_.metrics->Append(r));
  CHORUS_LOG_WARN(Subsys::kNode, "stopped by ", SignalName(stopped_by_), " at step ", step_, " (epoch ", epoch + 1,
                  ", batch ", i, " of ", sampler_->BatchesPerEpoch(), "); checkpoint ", s_.checkpoint_path,
                  ": --resume continues from it");
  return Status::Ok();
}

Status TrainingLoop::EndEpoch(int epoch) {
  if (sample_record_ != nullptr) sample_record_->EpochEnd(epoch, sampler_->SamplesPerEpoch());
  const int epochs_done = epoch + 1;
  const bool last_epoch = epochs_done == s_.config->train.epochs;
  const EvalPlan& plan = s_.evals;
  if (plan.at_epoch_ends && (last_epoch || (plan.every_epochs > 0 && epochs_done % plan.every_epochs == 0))) {
    CHORUS_RETURN_IF_ERROR(Evaluate(*s_.test, epochs_done, /*whole_test_set=*/true));
  }
  if (!s_.checkpoint_path.empty() &&
      (last_epoch || (s_.checkpoint_every_epochs > 0 && epochs_done % s_.checkpoint_every_epochs == 0))) {
    trainer::CheckpointInfo info = Position(step_);
    info.epoch = epochs_done;  // the next epoch starts afresh
    info.epoch_batches = 0;
    info.data_order.clear();
    info.partition_batches = 0;
    CHORUS_RETURN_IF_ERROR(trainer::SaveCheckpoint(*s_.trainer, info, s_.checkpoint_path));
  }
  return Status::Ok();
}

Status TrainingLoop::AppendConsensusMeasurements(bool wait) {
  for (const ConsensusMeasurement& m : s_.exchange->TakeConsensusMeasurements(wait)) {
    auto record = consensus_records_.find(m.key);
    if (record == consensus_records_.end()) continue;
    if (m.distance >= 0.0) {
      record->second["consensus_distance_exact"] = m.distance;
      record->second["consensus_point"] = m.key;
      CHORUS_RETURN_IF_ERROR(s_.metrics->Append(record->second));
    }
    consensus_records_.erase(record);
  }
  return Status::Ok();
}

// The end of training: the exchange's Finish (the consensus phase may change
// the weights, so what is evaluated and exported comes after it), the final
// evaluation, the model file, and the summary's fields.
Result<json> TrainingLoop::Summarise() {
  // The last measurement beside training is of this view's members: it ends
  // before this node follows a newer one. An evaluation's cost, not training's.
  const double m0 = s_.clock->Now();
  CHORUS_RETURN_IF_ERROR(AppendConsensusMeasurements(/*wait=*/true));
  eval_seconds_ += s_.clock->Now() - m0;
  const double train_seconds = s_.clock->Now() - t_start_ - eval_seconds_;
  // Every member finishes over the latest view (no joiner is admitted this late).
  if (free_running_) CHORUS_RETURN_IF_ERROR(FollowViewOnItsOwn());
  if (s_.trained) s_.trained(step_, s_.trainer->MasterWeights());
  CHORUS_RETURN_IF_ERROR(s_.exchange->Finish());
  const double finish_seconds = s_.clock->Now() - t_start_ - eval_seconds_ - train_seconds;
  trainer::Trainer& trainer = *s_.trainer;
  const uint64_t checksum = trainer.ParameterChecksum();
  trainer::EvalResult final_eval;
  if (s_.final_evaluation) {
    CHORUS_ASSIGN_OR_RETURN(final_eval, s_.final_evaluation(trainer, checksum));
  } else {
    CHORUS_ASSIGN_OR_RETURN(final_eval, trainer.Evaluate(*s_.test, kEvalBatch));
  }
  if (!s_.model_path.empty()) CHORUS_RETURN_IF_ERROR(trainer::ExportModel(trainer, s_.model_path));

  const double compute_seconds = s_.clock->compute_seconds();
  // In a cluster: the membership at the end (members may have joined or left).
  const MembershipView* end_view = s_.session != nullptr && s_.session->view.self_rank >= 0 ? &s_.session->view : nullptr;
  json summary = SummaryHeader(s_.exchange->Metrics(), s_.exchange->Describe(), s_.node_name,
                               end_view != nullptr ? end_view->self_rank : s_.rank,
                               end_view != nullptr ? end_view->size() : s_.world_size, s_.config->train,
                               GlobalBatch(), step_);
  if (s_.session != nullptr && s_.session->transport) {
    // Data-plane messages that failed authentication (forged, altered, of
    // another epoch, replayed): dropped, never used.
    summary["data_plane_rejected"] = s_.session->transport->Stats().messages_rejected;
    // Exchanges that failed with nobody gone (step_agreement.h).
    summary["reforms_asked"] = s_.session->reforms_asked;
    summary["hung_members_declared"] = s_.session->hung_members_declared;
    // The links measured at the last membership change (exchange.site_probe).
    if (!s_.session->site_probe_report.is_null()) summary["site_probe"] = s_.session->site_probe_report;
  }
  summary["train_seconds"] = train_seconds;
  summary["eval_seconds"] = eval_seconds_;
  summary["finish_seconds"] = finish_seconds;
  summary["compute_seconds"] = compute_seconds;
  summary["samples"] = samples_done_;
  summary["samples_per_s"] = samples_done_ / std::max(1e-9, train_seconds);
  summary["compute_samples_per_s"] = samples_done_ / std::max(1e-9, compute_seconds);
  if (free_running_) {
    // The cluster's sample counter as this node saw it at the end: the total
    // the budget was checked against, and each incarnation's part.
    summary["cluster_samples"] = ClusterSamples();
    if (s_.session->control != nullptr) summary["sample_counts"] = s_.session->control->SampleCounts();
  }
  summary["test_accuracy"] = final_eval.accuracy;
  summary["test_loss"] = final_eval.loss;
  summary["test_samples"] = final_eval.count;
  summary["final_train_loss"] = last_loss_;
  summary["skipped_steps"] = trainer.loss_scaler().skipped_steps();
  summary["loss_scale"] = trainer.loss_scaler().scale();
  // A string, as in the records: a 64-bit number does not survive JSON readers
  // that hold numbers as doubles.
  summary["parameter_checksum"] = std::to_string(checksum);
  return summary;
}

}  // namespace chorus::node
