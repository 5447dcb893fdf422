// RunNode: wires one training node in order (config -> logging -> data ->
// trainer -> exchange -> loop -> outputs) and owns the training loop.
//
// Must not: parse configs (the CLI did), know any exchange's internals, or
// write a file non-atomically that a reader may see half-written (metrics.jsonl
// is append-only by lines; checkpoints, the model and summary.json are atomic).
#include "node/run/run_node.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/ops.h"
#include "node/exchange/allreduce_exchange.h"
#include "node/cluster/cluster_session.h"
#include "node/exchange/exchange.h"
#include "node/exchange/gossip_exchange.h"
#include "node/outputs/trace.h"
#include "node/run/logging.h"
#include "node/outputs/metrics.h"
#include "node/run/progress_display.h"
#include "node/run/stop_signals.h"
#include "node/run/trainer_options.h"
#include "trainer/batch_sampler.h"
#include "trainer/checkpoint.h"
#include "trainer/dataset.h"
#include "trainer/trainer.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double PeakResidentMiB() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

// Everything one training run needs, built by RunNode and used by TrainLoop.
// Members are destroyed in reverse order: the exchange goes before the trace,
// trainer and cluster session it uses.
struct NodeRun {
  explicit NodeRun(const Config& c) : config(c) {}
  const Config& config;
  std::optional<ClusterSession> session;
  std::string node_name;
  std::string run_dir;
  int rank = 0;
  int world_size = 1;
  int global_batch = 0;
  trainer::Dataset train;
  trainer::Dataset test;
  std::unique_ptr<trainer::Trainer> trainer;
  std::unique_ptr<TraceWriter> trace;
  std::unique_ptr<Exchange> exchange;
  std::unique_ptr<MetricsWriter> metrics;
  LogSession* log_session = nullptr;
  const StopRequest* stop = nullptr;  // SIGINT/SIGTERM; none in tests that call RunNode directly
  int stopped_by = 0;                 // the signal the loop stopped for (TrainLoop), else 0
};

// The membership of a node that trains with others (two or more members),
// else null: what the loop's collective steps (resume, stop) run over.
const MembershipView* ClusterView(const NodeRun& run) {
  return run.session && run.session->view.size() >= 2 ? &run.session->view : nullptr;
}

// How long a signalled node waits for the others at a step's stop barrier.
// Under all-reduce the nodes reach a step's start within one update of each
// other (the previous step's sums end together), far less than this; a node
// signalled alone waits twice this before it stops.
constexpr double kStopAgreementSeconds = 0.5;

// Whether a node that got a stop signal stops before `step` (true) or trains
// it first (false). Under an exchange in lockstep the members of a cluster
// stop before the same step, so that their checkpoints agree and --resume
// trains every batch: they meet at the control-plane barrier
// "chorus.stop.<step>", which completes when every member got a signal too
// (Ctrl-C on a launch) and reached `step`. It times out when a member began
// `step` before its signal came (it waits in that step's all-reduce for this
// node): train the step with it and meet at the next one. A second timeout
// means the others got no signal (a SIGTERM to this node alone): it stops
// alone, leaving, and they re-form without it.
bool StopsBefore(NodeRun& run, int64_t step, int* timeouts) {
  const MembershipView* view = ClusterView(run);
  if (view == nullptr || run.session->control == nullptr || !run.exchange->StepsInLockstep()) return true;
  const Status met = run.session->control->Barrier("chorus.stop." + std::to_string(step), view->epoch,
                                                   Deadline::AfterSeconds(kStopAgreementSeconds));
  if (met.ok()) return true;
  if (met.code() == StatusCode::kDeadlineExceeded && ++*timeouts < 2) {
    CHORUS_LOG_INFO(Subsys::kNode, "stop before step ", step, " not agreed (", met.message(),
                    "): training it, then stopping with the others");
    return false;
  }
  CHORUS_LOG_WARN(Subsys::kNode, "stopping before step ", step, " without the others (", met.message(),
                  "): they go on without this node");
  return true;
}

// The loop: epochs of steps, evaluation, checkpoints. Returns the summary, or
// nothing when a stop signal ended it early (run.stopped_by): then it has
// written a checkpoint of where it stood, for --resume.
Result<std::optional<json>> TrainLoop(NodeRun& run, const NodeOptions& options) {
  const TrainConfig& tc = run.config.train;
  trainer::Trainer& trainer = *run.trainer;
  const std::string checkpoint_path = run.run_dir + "/checkpoint.safetensors";

  auto sampler_or = trainer::BatchSampler::Create(run.train.count, tc.batch_size, tc.seed,
                                                  run.rank, run.world_size, /*drop_last=*/true);
  if (!sampler_or) return Err(sampler_or.error());
  trainer::BatchSampler sampler = std::move(*sampler_or);
  const int64_t steps_per_epoch = sampler.BatchesPerEpoch();

  int64_t step = 0;
  int start_epoch = 0;
  int64_t steps_to_skip = 0;  // batches to pass over, one step each (a re-form's catch-up, a resume)
  if (options.resume) {
    if (fs::exists(checkpoint_path)) {
      CHORUS_ASSIGN_OR_RETURN(trainer::CheckpointInfo info,
                              trainer::LoadCheckpoint(checkpoint_path, &trainer));
      start_epoch = static_cast<int>(info.epoch);
      // A checkpoint of a stop, mid-epoch: the epoch's batches already trained
      // are skipped, one step each, as after a re-form.
      step = info.step - info.epoch_batches;
      steps_to_skip = info.epoch_batches;
      CHORUS_LOG_INFO(Subsys::kNode, "resumed from ", checkpoint_path, " at epoch ", start_epoch,
                      ", step ", info.step,
                      info.epoch_batches > 0 ? ", " + std::to_string(info.epoch_batches) + " batches into the epoch"
                                             : std::string());
    } else {
      CHORUS_LOG_WARN(Subsys::kNode, "--resume: no checkpoint at ", checkpoint_path,
                      "; starting from scratch");
    }
  }

  const MembershipView* view = ClusterView(run);
  if (options.resume && view != nullptr && view->epoch == 0) {
    // The founding nodes may have stopped steps apart (gossip, or a node
    // stopped alone): run from one step.
    CHORUS_RETURN_IF_ERROR(run.exchange->Resumed(step + steps_to_skip));
    steps_to_skip += run.exchange->TakeStepsToSkip();
  }

  ProgressOptions progress_options;
  progress_options.mode = ResolveProgressMode(run.config.run.progress, StderrIsTerminal());
  progress_options.log_every_steps = tc.log_every_steps;
  ConsoleLine fallback_console;
  ProgressDisplay progress(progress_options,
                           run.log_session ? &run.log_session->console() : &fallback_console);

  const double t_start = NowSeconds();
  double compute_seconds = 0.0;
  int64_t samples_done = 0;
  int64_t steps_done = 0;
  double last_loss = 0.0;
  trainer::EvalResult last_eval;
  bool have_eval = false;
  trainer::Batch batch;

  // Intermediate evaluations (every eval_every_steps) may use a prefix of the
  // test set; their time is kept out of `time` so curves show training time.
  trainer::Dataset eval_subset;
  const trainer::Dataset* eval_set = &run.test;
  if (tc.eval_samples > 0 && tc.eval_samples < run.test.count) {
    eval_subset = trainer::PrefixOf(run.test, tc.eval_samples);
    eval_set = &eval_subset;
  }
  double eval_seconds = 0.0;

  auto base_record = [&](int epoch) {
    json r = run.exchange->Metrics();
    const double now = NowSeconds();
    r["step"] = step;
    r["epoch"] = epoch;
    r["epoch_progress"] = static_cast<double>(step) / std::max<int64_t>(1, steps_per_epoch);
    r["time"] = now - t_start - eval_seconds;
    r["wall_time"] = now - t_start;
    r["lr"] = trainer.LearningRate(std::max<int64_t>(0, step - 1));
    r["loss_scale"] = trainer.loss_scaler().scale();
    r["skipped_steps"] = trainer.loss_scaler().skipped_steps();
    r["samples"] = samples_done;
    return r;
  };

  int stop_timeouts = 0;  // StopsBefore's
  for (int epoch = start_epoch; epoch < tc.epochs; ++epoch) {
    sampler.StartEpoch(epoch);
    double window_start = NowSeconds();
    int64_t window_samples = 0;
    double window_loss = 0.0;
    int64_t window_steps = 0;
    int64_t i = 0;
    for (; i < steps_per_epoch; ++i) {
      const int signal = run.stop != nullptr ? run.stop->requested() : 0;
      // Not while catching up: skipped steps take no time, and the others
      // wait at the first step this node trains.
      if (signal != 0 && steps_to_skip == 0 && StopsBefore(run, step, &stop_timeouts)) {
        run.stopped_by = signal;
        break;
      }
      if (!sampler.Next(run.train, &batch)) break;
      if (steps_to_skip > 0) {  // catching up with the survivors after a re-form
        --steps_to_skip;
        ++step;
        continue;
      }
      const double t0 = NowSeconds();
      CHORUS_RETURN_IF_ERROR(run.exchange->BeforeStep(step));
      CHORUS_ASSIGN_OR_RETURN(trainer::ForwardBackwardResult pass, trainer.ForwardBackward(batch));
      const double t_compute = NowSeconds() - t0;
      run.trace->Add("forward+backward", 0, static_cast<int64_t>(t0 * 1e6),
                     static_cast<int64_t>((t0 + t_compute) * 1e6), step);
      if (tc.slowdown > 0.0) {
        // Straggler emulation: sleep a fraction of this step's compute time.
        std::this_thread::sleep_for(std::chrono::duration<double>(tc.slowdown * t_compute));
      }
      CHORUS_RETURN_IF_ERROR(run.exchange->AfterBackward(step, pass.samples));
      // Abandoned in a re-form: the replicas were re-synchronised instead of
      // this update, which is not applied (and the step is not counted as done).
      const bool abandoned = run.exchange->TakeStepAbandoned();
      trainer::UpdateResult update;
      if (!abandoned) {
        CHORUS_ASSIGN_OR_RETURN(update, trainer.ApplyUpdate(step));
        CHORUS_RETURN_IF_ERROR(run.exchange->AfterUpdate(step));
      }
      steps_to_skip += run.exchange->TakeStepsToSkip();
      compute_seconds += t_compute;
      ++step;
      if (abandoned) continue;
      ++steps_done;
      samples_done += pass.samples;
      window_samples += pass.samples;
      window_loss += pass.loss;
      ++window_steps;
      last_loss = pass.loss;

      const double now = NowSeconds();
      ProgressUpdate pu;
      pu.epoch = epoch + 1;
      pu.epochs = tc.epochs;
      pu.step = i + 1;
      pu.steps_per_epoch = steps_per_epoch;
      pu.loss = pass.loss;
      pu.samples_per_s = window_samples / std::max(1e-9, now - window_start);
      pu.elapsed_s = now - t_start;
      progress.Update(pu);

      if (tc.log_every_steps > 0 && (step % tc.log_every_steps == 0)) {
        json r = base_record(epoch);
        r["loss"] = window_loss / std::max<int64_t>(1, window_steps);
        r["lr"] = update.lr;
        r["loss_scale"] = update.loss_scale;
        r["samples_per_s"] = window_samples / std::max(1e-9, now - window_start);
        // Equal on every node after every step under all-reduce (tests compare it).
        r["parameter_checksum"] = std::to_string(trainer.ParameterChecksum());
        CHORUS_RETURN_IF_ERROR(run.metrics->Append(r));
        window_start = now;
        window_samples = 0;
        window_loss = 0.0;
        window_steps = 0;
      }
      if (tc.eval_every_steps > 0 && step % tc.eval_every_steps == 0 && i + 1 < steps_per_epoch) {
        const double e0 = NowSeconds();
        CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult eval, trainer.Evaluate(*eval_set, 256));
        eval_seconds += NowSeconds() - e0;
        json r = base_record(epoch);
        r["eval_accuracy"] = eval.accuracy;
        r["eval_loss"] = eval.loss;
        r["eval_samples"] = eval_set->count;
        CHORUS_RETURN_IF_ERROR(run.metrics->Append(r));
      }
    }
    progress.Finish();
    if (run.stopped_by != 0) {
      // Where this node stands, for --resume: the trainer's state after `step`
      // steps, `i` batches into `epoch`.
      trainer::CheckpointInfo info{step, epoch, i};
      CHORUS_RETURN_IF_ERROR(trainer::SaveCheckpoint(trainer, info, checkpoint_path));
      json r = base_record(epoch);
      r["stopped"] = SignalName(run.stopped_by);
      r["parameter_checksum"] = std::to_string(trainer.ParameterChecksum());
      CHORUS_RETURN_IF_ERROR(run.metrics->Append(r));
      CHORUS_LOG_WARN(Subsys::kNode, "stopped by ", SignalName(run.stopped_by), " at step ", step, " (epoch ",
                      epoch + 1, ", batch ", i, " of ", steps_per_epoch, "); checkpoint ", checkpoint_path,
                      ": --resume continues from it");
      return std::optional<json>();
    }

    const bool last_epoch = epoch + 1 == tc.epochs;
    if (last_epoch || (tc.eval_every_epochs > 0 && (epoch + 1) % tc.eval_every_epochs == 0)) {
      const double e0 = NowSeconds();
      CHORUS_ASSIGN_OR_RETURN(last_eval, trainer.Evaluate(run.test, 256));
      eval_seconds += NowSeconds() - e0;
      have_eval = true;
      json r = base_record(epoch + 1);
      r["eval_samples"] = run.test.count;
      r["eval_accuracy"] = last_eval.accuracy;
      r["eval_loss"] = last_eval.loss;
      r["loss"] = last_loss;
      CHORUS_RETURN_IF_ERROR(run.metrics->Append(r));
      CHORUS_LOG_INFO(Subsys::kTrainer, "epoch ", epoch + 1, "/", tc.epochs, ": test accuracy ",
                      last_eval.accuracy, ", test loss ", last_eval.loss, ", ",
                      samples_done / std::max(1e-9, NowSeconds() - t_start), " samples/s");
    }
    if (last_epoch ||
        (tc.checkpoint_every_epochs > 0 && (epoch + 1) % tc.checkpoint_every_epochs == 0)) {
      trainer::CheckpointInfo info{step, epoch + 1};
      CHORUS_RETURN_IF_ERROR(trainer::SaveCheckpoint(trainer, info, checkpoint_path));
    }
  }
  const double train_seconds = NowSeconds() - t_start - eval_seconds;

  CHORUS_RETURN_IF_ERROR(run.exchange->Finish());
  // The consensus phase may change the weights: evaluate what is exported.
  CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult final_eval, trainer.Evaluate(run.test, 256));
  (void)have_eval;
  const std::string model_path = run.run_dir + "/model.safetensors";
  CHORUS_RETURN_IF_ERROR(trainer::ExportModel(trainer, model_path));

  json summary =
      SummaryHeader(run.exchange->Metrics(), run.exchange->Describe(), run.node_name, run.rank, run.world_size, tc, run.global_batch, step);
  summary["train_seconds"] = train_seconds;
  summary["eval_seconds"] = eval_seconds;
  summary["samples_per_s"] = samples_done / std::max(1e-9, train_seconds);
  summary["compute_samples_per_s"] = samples_done / std::max(1e-9, compute_seconds);
  summary["test_accuracy"] = final_eval.accuracy;
  summary["test_loss"] = final_eval.loss;
  summary["final_train_loss"] = last_loss;
  summary["skipped_steps"] = trainer.loss_scaler().skipped_steps();
  summary["loss_scale"] = trainer.loss_scaler().scale();
  summary["parameter_checksum"] = trainer.ParameterChecksum();
  summary["peak_rss_mib"] = PeakResidentMiB();
  summary["outputs"] = {{"metrics", run.metrics->path()},
                        {"checkpoint", checkpoint_path},
                        {"model", model_path},
                        {"summary", run.run_dir + "/summary.json"},
                        {"log", run.run_dir + "/log.txt"}};
  return std::optional<json>(std::move(summary));
}

// The end of a run, finished or stopped: writes the trace, ends the
// exchange's operations, and leaves the cluster. A stopped node says so
// (kStopping), so that the others end the epoch and re-form without it rather
// than wait for it until their op deadline; it writes no summary.json (the run
// did not finish; reports say so).
void EndRun(NodeRun& run, LeaveKind kind) {
  Status traced = run.trace->Write(run.run_dir + "/trace.json");
  if (!traced.ok()) CHORUS_LOG_WARN(Subsys::kNode, "trace: ", traced.ToString());
  run.exchange.reset();
  if (run.session && run.session->control) {
    Status left = run.session->control->Leave(Deadline::AfterSeconds(run.config.cluster.dead_timeout_s + 2), kind);
    if (!left.ok()) CHORUS_LOG_WARN(Subsys::kNode, "leave: ", left.ToString());
  }
}

}  // namespace

int RunNode(const Config& config, const NodeOptions& options) {
  NodeRun run(config);
  run.log_session = options.log_session;
  run.node_name = config.run.node_name.empty()
                      ? "node" + std::to_string(std::max(0, config.cluster.rank_hint))
                      : config.run.node_name;
  run.run_dir = NodeRunDir(config.run, run.node_name);
  std::error_code ec;
  fs::create_directories(run.run_dir, ec);
  if (ec) {
    CHORUS_LOG_ERROR(Subsys::kNode, "cannot create ", run.run_dir, ": ", ec.message());
    return 1;
  }
  if (options.log_session) {
    Status s = options.log_session->OpenFile(run.run_dir + "/log.txt");
    if (!s.ok()) CHORUS_LOG_WARN(Subsys::kNode, "no log file: ", s.ToString());
  }

  auto fail = [](const Status& s) {
    CHORUS_LOG_ERROR(Subsys::kNode, s.ToString());
    return 1;
  };
  StopRequest stop;
  Status watching = stop.Start([log = options.log_session] { FlushForExit(log); });
  if (!watching.ok()) return fail(watching);
  run.stop = &stop;

  kernels::SetThreads(config.train.threads);
  auto train = trainer::LoadFashionMnist(config.data.dir, trainer::Split::kTrain,
                                         config.data.train_limit);
  if (!train) return fail(train.error());
  auto test = trainer::LoadFashionMnist(config.data.dir, trainer::Split::kTest,
                                        config.data.test_limit);
  if (!test) return fail(test.error());
  run.train = std::move(*train);
  run.test = std::move(*test);

  // Cluster: any exchange other than "none", or a cluster of more than one node.
  std::optional<ClusterSession>& session = run.session;
  const bool clustered = config.exchange.kind != ExchangeKind::kNone || config.cluster.min_nodes > 1 ||
                         !config.cluster.bootstrap.empty();
  run.global_batch = config.train.batch_size;
  if (clustered) {
    auto joined = JoinCluster(config, /*with_fabric=*/true, options.resume, stop.before_exit());
    if (!joined) return fail(joined.error());
    session = std::move(*joined);
    run.rank = session->view.self_rank;
    run.world_size = session->view.size();
    run.global_batch = 0;
    for (const Member& m : session->view.members) run.global_batch += m.batch_size;
    CHORUS_LOG_INFO(Subsys::kNode, "cluster formed: ", session->view.Describe(), "; global batch ",
                    run.global_batch);
  }
  run.trace = std::make_unique<TraceWriter>(run.rank);
  const int64_t steps_per_epoch = run.train.count / run.world_size / config.train.batch_size;
  auto made = trainer::Trainer::Create(MakeTrainerOptions(config, run.global_batch, steps_per_epoch));
  if (!made) return fail(made.error());
  run.trainer = std::move(*made);

  switch (config.exchange.kind) {
    case ExchangeKind::kAllreduce: {
      auto ex = AllreduceExchange::Create(config, &*session, run.trainer.get(), run.trace.get());
      if (!ex) return fail(ex.error());
      run.exchange = std::move(*ex);
      break;
    }
    case ExchangeKind::kGossip: {
      auto ex = GossipExchange::Create(config, &*session, run.trainer.get(), run.trace.get());
      if (!ex) return fail(ex.error());
      run.exchange = std::move(*ex);
      break;
    }
    case ExchangeKind::kNone: run.exchange = std::make_unique<SoloExchange>(); break;
  }

  auto metrics = MetricsWriter::Open(run.run_dir + "/metrics.jsonl", options.resume);
  if (!metrics) return fail(metrics.error());
  run.metrics = std::move(*metrics);

  CHORUS_LOG_INFO(Subsys::kNode, run.node_name, ": model ", trainer::ModelName(config.train.model), " (",
                  run.trainer->model().parameter_count(), " parameters), ",
                  trainer::PrecisionName(config.train.precision), " + ",
                  trainer::OptimizerKindName(config.train.optimizer),
                  ", batch ", config.train.batch_size, ", ", config.train.epochs, " epochs, on ",
                  run.trainer->DeviceDescription(), ", ", config.train.threads,
                  " threads, kernels fp16 path ", kernels::HalfConversionPath(),
                  "; exchange: ", run.exchange->Describe());

  stop.EnterStoppablePhase();
  Result<std::optional<json>> finished = TrainLoop(run, options);
  if (!finished) return fail(finished.error());
  if (!finished->has_value()) {
    EndRun(run, LeaveKind::kStopping);
    return 128 + run.stopped_by;  // the shell's status for the signal
  }
  const json* summary = &**finished;
  const std::string summary_path = run.run_dir + "/summary.json";
  Status written = WriteSummary(summary_path, *summary);
  if (!written.ok()) return fail(written);
  EndRun(run, LeaveKind::kDone);

  std::printf("\n== %s summary ==\n", run.node_name.c_str());
  std::printf("  test accuracy   %.4f (loss %.4f)\n", (*summary)["test_accuracy"].get<double>(),
              (*summary)["test_loss"].get<double>());
  std::printf("  samples/s       %.0f (%.1f s training, %lld steps, %lld skipped)\n",
              (*summary)["samples_per_s"].get<double>(),
              (*summary)["train_seconds"].get<double>(),
              static_cast<long long>((*summary)["steps"].get<int64_t>()),
              static_cast<long long>((*summary)["skipped_steps"].get<int64_t>()));
  std::printf("  outputs         %s/ (metrics.jsonl, summary.json, model.safetensors, "
              "checkpoint.safetensors, log.txt)\n",
              run.run_dir.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace chorus::node
