// The one training loop (see training_loop.h).
#include "node/run/training_loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "node/config/config_check.h"
#include "trainer/checkpoint.h"

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
  CHORUS_ASSIGN_OR_RETURN(steps_per_epoch_, StepsPerEpoch(*s_.config, s_.train->count, s_.world_size));
  CHORUS_ASSIGN_OR_RETURN(trainer::BatchSampler sampler,
                          trainer::BatchSampler::Create(s_.train->count, tc.batch_size, tc.seed, s_.rank,
                                                        s_.world_size, /*drop_last=*/true));
  sampler_.emplace(std::move(sampler));
  CHORUS_RETURN_IF_ERROR(Resume());

  t_start_ = s_.clock->Now();
  trainer::Batch batch;
  for (int epoch = start_epoch_; epoch < tc.epochs; ++epoch) {
    sampler_->StartEpoch(epoch);
    window_ = Window{s_.clock->Now()};
    int64_t i = 0;
    for (; i < steps_per_epoch_; ++i) {
      if (StopsBefore()) break;
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
      ShowProgress(epoch, i, pass);
      const bool epoch_end = i + 1 == steps_per_epoch_;
      if (step_ % s_.log_every == 0 || (epoch_end && s_.record_epoch_ends)) {
        CHORUS_RETURN_IF_ERROR(RecordWindow(epoch, epoch_end, update));
      }
      CHORUS_RETURN_IF_ERROR(EvaluateIfDue(epoch, epoch_end));
    }
    if (s_.progress != nullptr) s_.progress->Finish();
    if (stopped_by_ != 0) {
      CHORUS_RETURN_IF_ERROR(StopWithCheckpoint(epoch, i));
      return std::optional<json>();
    }
    CHORUS_RETURN_IF_ERROR(EndEpoch(epoch));
  }
  CHORUS_ASSIGN_OR_RETURN(json summary, Summarise());
  return std::optional<json>(std::move(summary));
}

// With --resume, the trainer's state from the checkpoint; then, in a cluster
// that stopped together, the step every member runs from.
Status TrainingLoop::Resume() {
  if (!s_.resume) return Status::Ok();
  if (std::filesystem::exists(s_.checkpoint_path)) {
    CHORUS_ASSIGN_OR_RETURN(trainer::CheckpointInfo info, trainer::LoadCheckpoint(s_.checkpoint_path, s_.trainer));
    start_epoch_ = static_cast<int>(info.epoch);
    // A checkpoint of a stop, mid-epoch: the epoch's batches already trained
    // are skipped, one step each, as after a re-form.
    step_ = info.step - info.epoch_batches;
    steps_to_skip_ = info.epoch_batches;
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
    CHORUS_ASSIGN_OR_RETURN(*update, s_.trainer->ApplyUpdate(step_));
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
  update.steps_per_epoch = steps_per_epoch_;
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
  r["epoch_progress"] = static_cast<double>(step_) / static_cast<double>(std::max<int64_t>(1, steps_per_epoch_));
  r["time"] = now - t_start_ - eval_seconds_;
  r["wall_time"] = now - t_start_;
  r["lr"] = trainer.LearningRate(std::max<int64_t>(0, step_ - 1));
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
    CHORUS_RETURN_IF_ERROR(
        trainer::SaveCheckpoint(*s_.trainer, trainer::CheckpointInfo{step_, epoch, i}, s_.checkpoint_path));
  }
  json r = BaseRecord(epoch);
  r["stopped"] = SignalName(stopped_by_);
  r["parameter_checksum"] = std::to_string(s_.trainer->ParameterChecksum());
  CHORUS_RETURN_IF_ERROR(s_.metrics->Append(r));
  CHORUS_LOG_WARN(Subsys::kNode, "stopped by ", SignalName(stopped_by_), " at step ", step_, " (epoch ", epoch + 1,
                  ", batch ", i, " of ", steps_per_epoch_, "); checkpoint ", s_.checkpoint_path,
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
    CHORUS_RETURN_IF_ERROR(
        trainer::SaveCheckpoint(*s_.trainer, trainer::CheckpointInfo{step_, epochs_done}, s_.checkpoint_path));
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
  json summary = SummaryHeader(s_.exchange->Metrics(), s_.exchange->Describe(), s_.node_name, s_.rank,
                               s_.world_size, s_.config->train, s_.global_batch, step_);
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
