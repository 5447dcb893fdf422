// RunNode: wires one training node in order (run folder and log file, stop
// signals, data, cluster, trainer, exchange, metrics), runs the training loop
// (training_loop.h) and writes what a finished run leaves.
//
// Must not: parse configs (the CLI did), know any exchange's internals, or
// write a file non-atomically that a reader may see half-written.
#include "node/run/run_node.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/ops.h"
#include "node/cluster/cluster_session.h"
#include "node/exchange/exchange.h"
#include "node/exchange/exchange_factory.h"
#include "node/outputs/metrics.h"
#include "node/outputs/trace.h"
#include "node/run/logging.h"
#include "node/run/progress_display.h"
#include "node/run/stop_signals.h"
#include "node/run/trainer_options.h"
#include "node/run/training_loop.h"
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

// Everything one training run needs, built by RunNode's steps. Members are
// destroyed in reverse order: the exchange goes before the trace, trainer and
// cluster session it uses.
struct NodeRun {
  explicit NodeRun(const Config& c) : config(c) {}
  const Config& config;
  std::optional<ClusterSession> session;
  std::string node_name;
  std::string run_dir;
  int rank = 0;
  int world_size = 1;
  int global_batch = 0;
  int64_t steps_per_epoch = 0;
  trainer::Dataset train;
  trainer::Dataset test;
  trainer::Dataset eval_subset;  // intermediate evaluations' prefix of the test set (train.eval_samples)
  std::unique_ptr<trainer::Trainer> trainer;
  std::unique_ptr<TraceWriter> trace;
  std::unique_ptr<Exchange> exchange;
  std::unique_ptr<MetricsWriter> metrics;
  LogSession* log_session = nullptr;
};

// runs/<run>/<node>/ and the node's log file in it.
Status OpenRunDir(NodeRun& run) {
  const Config& config = run.config;
  run.node_name = config.run.node_name.empty() ? "node" + std::to_string(std::max(0, config.cluster.rank_hint))
                                               : config.run.node_name;
  run.run_dir = NodeRunDir(config.run, run.node_name);
  std::error_code ec;
  fs::create_directories(run.run_dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create " + run.run_dir);
  if (run.log_session != nullptr) {
    Status s = run.log_session->OpenFile(run.run_dir + "/log.txt");
    if (!s.ok()) CHORUS_LOG_WARN(Subsys::kNode, "no log file: ", s.ToString());
  }
  return Status::Ok();
}

Status LoadData(NodeRun& run) {
  const DataConfig& data = run.config.data;
  CHORUS_ASSIGN_OR_RETURN(run.train, trainer::LoadFashionMnist(data.dir, trainer::Split::kTrain, data.train_limit));
  CHORUS_ASSIGN_OR_RETURN(run.test, trainer::LoadFashionMnist(data.dir, trainer::Split::kTest, data.test_limit));
  const int eval_samples = run.config.train.eval_samples;
  if (eval_samples > 0 && eval_samples < run.test.count) run.eval_subset = trainer::PrefixOf(run.test, eval_samples);
  return Status::Ok();
}

// A node trains in a cluster under any exchange other than none, or when it
// expects or names other nodes; the global batch is the sum of the members'.
Status JoinIfClustered(NodeRun& run, bool resume, const StopRequest& stop) {
  const Config& config = run.config;
  run.global_batch = config.train.batch_size;
  const bool clustered = config.exchange.kind != ExchangeKind::kNone || config.cluster.min_nodes > 1 ||
                         !config.cluster.bootstrap.empty();
  if (!clustered) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(ClusterSession joined, JoinCluster(config, /*with_fabric=*/true, resume, stop.before_exit()));
  run.session = std::move(joined);
  run.rank = run.session->view.self_rank;
  run.world_size = run.session->view.size();
  run.global_batch = run.session->view.GlobalBatch();
  CHORUS_LOG_INFO(Subsys::kNode, "cluster formed: ", run.session->view.Describe(), "; global batch ",
                  run.global_batch);
  return Status::Ok();
}

// The trainer (its schedule follows this node's steps per epoch), the
// exchange the config names, and the metrics file.
Status BuildTraining(NodeRun& run, bool resume) {
  const Config& config = run.config;
  run.trace = std::make_unique<TraceWriter>(run.rank);
  CHORUS_ASSIGN_OR_RETURN(run.steps_per_epoch, ClusterStepsPerEpoch(config, run.train.count, run.global_batch));
  CHORUS_ASSIGN_OR_RETURN(run.trainer,
                          trainer::Trainer::Create(MakeTrainerOptions(config, run.global_batch, run.steps_per_epoch)));
  ClusterSession* session = run.session ? &*run.session : nullptr;
  CHORUS_ASSIGN_OR_RETURN(run.exchange, MakeExchange(config, session, run.trainer.get(), run.trace.get()));
  CHORUS_ASSIGN_OR_RETURN(run.metrics, MetricsWriter::Open(run.run_dir + "/metrics.jsonl", resume));
  const TrainConfig& tc = config.train;
  CHORUS_LOG_INFO(Subsys::kNode, run.node_name, ": model ", trainer::ModelName(tc.model), " (",
                  run.trainer->model().parameter_count(), " parameters), ", trainer::PrecisionName(tc.precision),
                  " + ", trainer::OptimizerKindName(tc.optimizer), ", batch ", tc.batch_size, ", ", tc.epochs,
                  " epochs, on ", run.trainer->DeviceDescription(), ", ", tc.threads,
                  " threads, kernels fp16 path ", kernels::HalfConversionPath(), ", GEMM ",
                  kernels::GemmDescription(),
                  "; exchange: ", run.exchange->Describe());
  return Status::Ok();
}

LoopSetup MakeLoopSetup(NodeRun& run, const NodeOptions& options, StepClock* clock, const StopRequest* stop,
                        ProgressDisplay* progress) {
  const TrainConfig& tc = run.config.train;
  LoopSetup s;
  s.config = &run.config;
  s.trainer = run.trainer.get();
  s.exchange = run.exchange.get();
  s.metrics = run.metrics.get();
  s.clock = clock;
  s.train = &run.train;
  s.test = &run.test;
  s.node_name = run.node_name;
  s.rank = run.rank;
  s.world_size = run.world_size;
  s.evals.step_set = run.eval_subset.count > 0 ? &run.eval_subset : &run.test;
  s.evals.every_steps = tc.eval_every_steps;
  s.evals.at_epoch_ends = true;
  s.evals.every_epochs = tc.eval_every_epochs;
  s.log_every = tc.log_every_steps;
  s.checksum_in_records = true;
  s.session = run.session ? &*run.session : nullptr;
  s.stop = stop;
  s.progress = progress;
  s.trace = run.trace.get();
  s.resume = options.resume;
  s.checkpoint_path = run.run_dir + "/checkpoint.safetensors";
  s.model_path = run.run_dir + "/model.safetensors";
  s.checkpoint_every_epochs = tc.checkpoint_every_epochs;
  return s;
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

// summary.json, with what only a real run has (memory, the files it wrote).
Status WriteRunSummary(const NodeRun& run, json& summary) {
  summary["peak_rss_mib"] = PeakResidentMiB();
  summary["outputs"] = {{"metrics", run.metrics->path()},
                        {"checkpoint", run.run_dir + "/checkpoint.safetensors"},
                        {"model", run.run_dir + "/model.safetensors"},
                        {"summary", run.run_dir + "/summary.json"},
                        {"log", run.run_dir + "/log.txt"}};
  return WriteSummary(run.run_dir + "/summary.json", summary);
}

void PrintSummary(const NodeRun& run, const json& summary) {
  std::printf("\n== %s summary ==\n", run.node_name.c_str());
  std::printf("  test accuracy   %.4f (loss %.4f)\n", summary["test_accuracy"].get<double>(),
              summary["test_loss"].get<double>());
  std::printf("  samples/s       %.0f (%.1f s training, %lld steps, %lld skipped)\n",
              summary["samples_per_s"].get<double>(), summary["train_seconds"].get<double>(),
              static_cast<long long>(summary["steps"].get<int64_t>()),
              static_cast<long long>(summary["skipped_steps"].get<int64_t>()));
  std::printf("  outputs         %s/ (metrics.jsonl, summary.json, model.safetensors, "
              "checkpoint.safetensors, log.txt)\n",
              run.run_dir.c_str());
  std::fflush(stdout);
}

}  // namespace

int RunNode(const Config& config, const NodeOptions& options) {
  auto fail = [](const Status& s) {
    CHORUS_LOG_ERROR(Subsys::kNode, s.ToString());
    return 1;
  };
  NodeRun run(config);
  run.log_session = options.log_session;
  if (Status s = OpenRunDir(run); !s.ok()) return fail(s);
  StopRequest stop;
  if (Status s = stop.Start([log = options.log_session] { FlushForExit(log); }); !s.ok()) return fail(s);
  kernels::SetThreads(config.train.threads);
  if (Status s = LoadData(run); !s.ok()) return fail(s);
  if (Status s = JoinIfClustered(run, options.resume, stop); !s.ok()) {
    if (!RunEndedBeforeAdmission(s)) return fail(s);
    CHORUS_LOG_INFO(Subsys::kNode, "exiting without a model: ", s.message());
    return 0;
  }
  if (Status s = BuildTraining(run, options.resume); !s.ok()) return fail(s);

  ProgressOptions progress_options;
  progress_options.mode = ResolveProgressMode(config.run.progress, StderrIsTerminal());
  progress_options.log_every_steps = config.train.log_every_steps;
  ConsoleLine fallback_console;
  ProgressDisplay progress(progress_options, run.log_session ? &run.log_session->console() : &fallback_console);
  WallClock clock(config.train.slowdown);
  TrainingLoop loop(MakeLoopSetup(run, options, &clock, &stop, &progress));

  stop.EnterStoppablePhase();
  Result<std::optional<json>> finished = loop.Run();
  if (!finished) {
    if (run.session && run.session->transport) run.session->transport->EndForExit();
    return fail(finished.error());
  }
  if (!finished->has_value()) {
    EndRun(run, LeaveKind::kStopping);
    return 128 + loop.stopped_by();  // the shell's status for the signal
  }
  json& summary = **finished;
  if (Status s = WriteRunSummary(run, summary); !s.ok()) return fail(s);
  EndRun(run, LeaveKind::kDone);
  PrintSummary(run, summary);
  return 0;
}

}  // namespace chorus::node
