// The one training loop (see training_loop.h).
#include "node/run/training_loop.h"

#include <algorithm>
#include <chrono>
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

// The membership of a node that trains with others (two or more members),
// else null: what the loop's collective steps (resume, stop) run over.
const MembershipView* ClusterView(const ClusterSession* session) {
  return session != nullptr && session->view.size() >= 2 ? &session->view : nullptr;
}

}  // namespace

double WallClock::Now() { return NowSeconds(); }

void WallClock::ComputeEnded(double measured_s) {
  compute_seconds_ += measured_s;
  if (slowdown_ > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(slowdown_ * measured_s));
}

Result<int64_t> StepsPerEpoch(const Config& config, int train_images, int world_size) {
  const int batch = config.train.batch_size;
  const int64_t shard = world_size > 0 ? train_images / world_size : 0;
  if (batch < 1 || shard / batch < 1) {
    return Err(InvalidArgument(SettingOrigin(config, "train.batch_size") + ": train.batch_size: " +
                               std::to_string(batch) + " is larger than this node's shard of " +
                               std::to_string(shard) + " images (" + std::to_string(train_images) +
                               " training images over " + std::to_string(world_size) +
                               " nodes): it would train no step"));
  }
  return shard / batch;
}

Result<std::optional<json>> TrainingLoop::Run() {
  const TrainConfig& tc = s_.config->train;
  CHORUS_RETURN_IF_ERROR(StatusOf(StepsPerEpoch(*s_.config, s_.train->count, s_.world_size)));  // a shard holds a batch
  CHORUS_ASSIGN_OR_RETURN(trainer::BatchSampler sampler,
                          trainer::BatchSampler::Create(s_.train->count, tc.batch_size, tc.seed, s_.rank,
                                                        s_.world_size, /*drop_last=*/true,
                                                        s_.session != nullptr ? s_.session->view.epoch : 0));
  sampler_.emplace(std::move(sampler));
  s_.exchange->SetLiveState(this);
  CHORUS_RETURN_IF_ERROR(Resume());
  rate_since_step_ = step_;
  rate_since_time_ = NowSeconds();
  if (s_.session != nullptr && s_.session->control != nullptr) s_.session->control->ReportProgress(step_, step_);

  t_start_ = s_.clock->Now();
  trainer::Batch batch;
  for (epoch_ = start_epoch_; epoch_ < tc.epochs; ++epoch_) {
    const int epoch = epoch_;
    if (!std::exchange(positioned_, false)) sampler_->StartEpoch(epoch);
    window_ = Window{s_.clock->Now()};
    while (true) {
      if (StopsBefore()) break;
      CHORUS_RETURN_IF_ERROR(FollowMembership());
      CHORUS_RETURN_IF_ERROR(AdmitIfDue());
      if (!sampler_->Next(*s_.train, &batch)) break;
      if (steps_to_skip_ > 0) {  // catching up with the survivors after a re-form, or a resume
        --steps_to_skip_;
        ++step_;
        continue;
      }
      trainer::ForwardBackwardResult pass;
      trainer::UpdateResult update;
      bool abandoned = false;
      CHORUS_RETURN_IF_ERROR(TrainStep(batch, &pass, &update, &abandoned));
      if (abandoned) continue;
      samples_done_ += pass.samples;
      last_loss_ = pass.loss;
      window_.samples += pass.samples;
      window_.loss += pass.loss;
      ++window_.steps;
      ShowProgress(epoch, sampler_->BatchesTaken() - 1, pass);
      const bool epoch_end = sampler_->BatchesTaken() >= sampler_->BatchesPerEpoch();
      if (step_ % s_.log_every == 0 || (epoch_end && s_.record_epoch_ends)) {
        CHORUS_RETURN_IF_ERROR(RecordWindow(epoch, epoch_end, update));
      }
      CHORUS_RETURN_IF_ERROR(EvaluateIfDue(epoch, epoch_end));
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
  CHORUS_RETURN_IF_ERROR(s_.exchange->Joined());
  if (needs_live_state_) {
    return FailedPrecondition(s_.node_name + " joined the running cluster but received no state from its members");
  }
  steps_to_skip_ += s_.exchange->TakeStepsToSkip();
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
  CHORUS_RETURN_IF_ERROR(s_.trainer->SetSchedule(info.schedule_steps_per_epoch, static_cast<int>(info.global_batch)));
  // Positioned as the sender: FollowMembership re-partitions for this node.
  CHORUS_RETURN_IF_ERROR(sampler_->Restore(static_cast<int>(info.epoch), info.data_order, 0,
                                           static_cast<int>(info.partition_batches)));
  step_ = info.step;
  start_epoch_ = static_cast<int>(info.epoch);
  epoch_ = start_epoch_;
  positioned_ = true;
  needs_live_state_ = false;
  return Status::Ok();
}

trainer::CheckpointInfo TrainingLoop::Position(int64_t next_step) const {
  trainer::CheckpointInfo info;
  info.step = next_step;
  info.epoch = epoch_;
  info.epoch_batches = sampler_->BatchesTaken();
  info.data_order = sampler_->History();
  info.partition_batches = sampler_->BatchesTakenInPartition();
  info.schedule_steps_per_epoch = s_.trainer->options().steps_per_epoch;
  info.global_batch = s_.trainer->options().global_batch > 0 ? s_.trainer->options().global_batch : s_.global_batch;
  return info;
}

// With --resume, the trainer's state from the checkpoint; then, in a cluster
// that stopped together, the step every member runs from.
Status TrainingLoop::ResumeFromCheckpoint() {
  if (!s_.resume) return Status::Ok();
  if (std::filesystem::exists(s_.checkpoint_path)) {
    CHORUS_ASSIGN_OR_RETURN(trainer::CheckpointInfo info, trainer::LoadCheckpoint(s_.checkpoint_path, s_.trainer));
    start_epoch_ = static_cast<int>(info.epoch);
    epoch_ = start_epoch_;
    step_ = info.step;
    if (info.epoch_batches > 0) {
      // A checkpoint of a stop, mid-epoch: the sampler stands where it stood
      // (a checkpoint without a data order was taken over this membership:
      // the fresh sampler's one partition).
      const std::string order = !info.data_order.empty() ? info.data_order : sampler_->History();
      const int64_t in_partition = !info.data_order.empty() ? info.partition_batches : info.epoch_batches;
      CHORUS_RETURN_IF_ERROR(sampler_->Restore(start_epoch_, order, std::min(s_.rank, sampler_->world_size() - 1),
                                               static_cast<int>(in_partition)));
      CHORUS_RETURN_IF_ERROR(FollowMembership());
      positioned_ = true;
    }
    CHORUS_LOG_INFO(Subsys::kNode, "resumed from ", s_.checkpoint_path, " at epoch ", start_epoch_, ", step ",
                    info.step,
                    info.epoch_batches > 0 ? ", " + std::to_string(info.epoch_batches) + " batches into the epoch"
                                           : std::string());
  } else {
    CHORUS_LOG_WARN(Subsys::kNode, "--resume: no checkpoint at ", s_.checkpoint_path, "; starting from scratch");
  }
  const MembershipView* view = ClusterView(s_.session);
  if (view != nullptr && view->epoch == 0) {
    // The founding nodes may have stopped steps apart (gossip, or a node
    // stopped alone): run from one step.
    CHORUS_RETURN_IF_ERROR(s_.exchange->Resumed(step_ + steps_to_skip_));
    steps_to_skip_ += s_.exchange->TakeStepsToSkip();
  }
  return Status::Ok();
}

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
  if (session == nullptr || session->control == nullptr || cc.admit_every_steps <= 0 || steps_to_skip_ > 0 ||
      step_ < next_admission_step_ || step_ == last_admission_step_) {
    return Status::Ok();
  }
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
  int64_t agreed = -1;
  Result<MembershipView> next = session->control->AdvanceEpochIfPending(
      Deadline::AfterSeconds(s_.config->fabric.op_timeout_s), step_ + ahead, &agreed);
  next_admission_step_ = agreed > step_ ? agreed : step_ + cc.admit_every_steps;
  session->control->ReportProgress(step_, next_admission_step_);  // the coordinator tells joiners
  if (!next) {
    // A member lost on the way: the exchange's next operation re-forms.
    CHORUS_LOG_INFO(Subsys::kNode, "admission point before step ", step_, ": ", next.error().message());
    return Status::Ok();
  }
  if (next->epoch <= epoch || next->joined.empty()) return Status::Ok();
  const std::string names = JoinNames(next->joined);
  CHORUS_LOG_INFO(Subsys::kNode, "admitting ", names, " before step ", step_, " (epoch ", next->epoch, ", ",
                  next->size(), " members)");
  const double t0 = NowSeconds();
  CHORUS_RETURN_IF_ERROR(s_.exchange->Admit(*next, step_));
  steps_to_skip_ += s_.exchange->TakeStepsToSkip();
  CHORUS_LOG_INFO(Subsys::kNode, "admitted ", names, " in ", NowSeconds() - t0, " s");
  if (s_.trace != nullptr) {
    s_.trace->Add("admission", 1, static_cast<int64_t>(t0 * 1e6), static_cast<int64_t>(NowSeconds() * 1e6), step_);
  }
  return FollowMembership();
}

Status TrainingLoop::FollowMembership() {
  if (s_.session == nullptr || steps_to_skip_ > 0) return Status::Ok();
  const MembershipView& view = s_.session->view;
  if (view.self_rank < 0 || sampler_->partition() == view.epoch) return Status::Ok();
  const int taken = sampler_->BatchesTakenInPartition();
  CHORUS_RETURN_IF_ERROR(sampler_->Repartition(view.self_rank, view.size(), view.epoch));
  // Every member is at this step now: the next admission point is the same for all.
  next_admission_step_ = step_ + s_.config->cluster.admit_every_steps;
  rate_since_step_ = step_;
  rate_since_time_ = NowSeconds();
  int global_batch = 0;
  for (const Member& m : view.members) global_batch += m.batch_size;
  CHORUS_RETURN_IF_ERROR(s_.trainer->SetSchedule(s_.trainer->options().steps_per_epoch, global_batch));
  CHORUS_LOG_INFO(Subsys::kNode, "epoch ", epoch_ + 1, ": the rest of the data (after ", taken,
                  " batches) re-partitioned over ", view.size(), " members: ",
                  sampler_->BatchesPerEpoch() - sampler_->BatchesTaken(), " batches left for this node; global batch ",
                  global_batch);
  return Status::Ok();
}

double TrainingLoop::SchedulePosition() const {
  // The schedule's epochs hold steps_per_epoch steps; an epoch of a changed
  // membership holds another number: its fraction done maps onto them. Equal
  // on every member (same partitions), and equal to the step count when
  // nothing changed.
  const int64_t spe = s_.trainer->options().steps_per_epoch;
  const int64_t in_epoch = sampler_->BatchesPerEpoch();
  const int64_t done = std::max(0, sampler_->BatchesTaken() - 1);
  if (in_epoch == spe || in_epoch < 1) return static_cast<double>(static_cast<int64_t>(epoch_) * spe + done);
  return static_cast<double>(static_cast<int64_t>(epoch_) * spe) +
         static_cast<double>(done) * static_cast<double>(spe) / static_cast<double>(in_epoch);
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
  if (signal == 0 || steps_to_skip_ > 0) return false;
  const MembershipView* view = ClusterView(s_.session);
  if (view != nullptr && s_.session->control != nullptr && s_.exchange->StepsInLockstep()) {
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
  s_.clock->ComputeStarts();
  const double t0 = NowSeconds();
  CHORUS_RETURN_IF_ERROR(s_.exchange->BeforeStep(step_));
  CHORUS_ASSIGN_OR_RETURN(*pass, s_.trainer->ForwardBackward(batch));
  const double t_compute = NowSeconds() - t0;
  if (s_.trace != nullptr) {
    s_.trace->Add("forward+backward", 0, static_cast<int64_t>(t0 * 1e6),
                  static_cast<int64_t>((t0 + t_compute) * 1e6), step_);
  }
  s_.clock->ComputeEnded(t_compute);
  CHORUS_RETURN_IF_ERROR(s_.exchange->AfterBackward(step_, pass->samples));
  *abandoned = s_.exchange->TakeStepAbandoned();
  if (!*abandoned) {
    s_.clock->UpdateStarts();
    CHORUS_ASSIGN_OR_RETURN(*update, s_.trainer->ApplyUpdate(step_, SchedulePosition()));
    CHORUS_RETURN_IF_ERROR(s_.exchange->AfterUpdate(step_));
  }
  steps_to_skip_ += s_.exchange->TakeStepsToSkip();
  ++step_;
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
  r["epoch_progress"] = epoch + static_cast<double>(sampler_->BatchesTaken()) /
                                    static_cast<double>(std::max(1, sampler_->BatchesPerEpoch()));
  r["time"] = now - t_start_ - eval_seconds_;
  r["wall_time"] = now - t_start_;
  r["lr"] = trainer.LearningRate(SchedulePosition());
  r["loss_scale"] = trainer.loss_scaler().scale();
  r["skipped_steps"] = trainer.loss_scaler().skipped_steps();
  r["samples"] = samples_done_;
  return r;
}

// The steps since the last record: mean loss, this step's lr and loss scale,
// samples/s. A record at an epoch's last step counts that epoch as done.
Status TrainingLoop::RecordWindow(int epoch, bool epoch_end, const trainer::UpdateResult& update) {
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

// One evaluation and its record. Its time is kept out of the records' `time`
// (eval_seconds_), so curves show training time.
Status TrainingLoop::Evaluate(const trainer::Dataset& set, int epoch, bool whole_test_set) {
  const double e0 = s_.clock->Now();
  CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult eval, s_.trainer->Evaluate(set, kEvalBatch));
  eval_seconds_ += s_.clock->Now() - e0;
  json r = BaseRecord(epoch);
  r["eval_accuracy"] = eval.accuracy;
  r["eval_loss"] = eval.loss;
  r["eval_samples"] = set.count;
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

// The end of training: the exchange's Finish (the consensus phase may change
// the weights, so what is evaluated and exported comes after it), the final
// evaluation, the model file, and the summary's fields.
Result<json> TrainingLoop::Summarise() {
  const double train_seconds = s_.clock->Now() - t_start_ - eval_seconds_;
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
                               s_.global_batch, step_);
  summary["train_seconds"] = train_seconds;
  summary["eval_seconds"] = eval_seconds_;
  summary["finish_seconds"] = finish_seconds;
  summary["compute_seconds"] = compute_seconds;
  summary["samples_per_s"] = samples_done_ / std::max(1e-9, train_seconds);
  summary["compute_samples_per_s"] = samples_done_ / std::max(1e-9, compute_seconds);
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
