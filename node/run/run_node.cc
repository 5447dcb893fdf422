// RunNode: wires one training node in order (run folder and log file, stop
// signals, data, cluster, trainer, exchange, metrics), runs the training loop
// (training_loop.h) and writes what a finished run leaves.
//
// Must not: parse configs (the CLI did), know any exchange's internals, or
// write a file non-atomically that a reader may see half-written.
#include "node/run/run_node.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/files.h"
#include "common/log.h"
#include "kernels/ops.h"
#include "node/cluster/cluster_session.h"
#include "node/cluster/step_agreement.h"
#include "node/config/config_describe.h"
#include "node/control/listen_socket.h"
#include "node/exchange/exchange.h"
#include "node/exchange/exchange_factory.h"
#include "node/outputs/metrics.h"
#include "node/outputs/run_dir_lock.h"
#include "node/outputs/trace.h"
#include "node/run/logging.h"
#include "node/run/progress_display.h"
#include "node/run/stop_signals.h"
#include "node/run/trainer_options.h"
#include "node/run/training_loop.h"
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
  std::optional<RunDirLock> lock;  // held while the node writes run_dir
};

// A node trains in a cluster under any exchange other than none, or when it
// expects or names other nodes.
bool Clustered(const Config& config) {
  return config.exchange.kind != ExchangeKind::kNone || config.cluster.min_nodes > 1 ||
         !config.cluster.bootstrap.empty();
}

// An unnamed node of a cluster (no run.node_name, no rank hint) takes its
// folder's name from its rank once the cluster formed: nodes started by hand
// without names then write node0, node1, ... rather than one folder.
bool NamedByRank(const Config& config) {
  return config.run.node_name.empty() && config.cluster.rank_hint < 0 && Clustered(config);
}

// The node's name and its folder, runs/<run>/<node>/: run.node_name, else
// node<rank> (the rank hint's before forming; NamedByRank: the cluster's).
void NameRunDir(NodeRun& run) {
  const Config& config = run.config;
  const int rank = run.session ? run.session->view.self_rank : config.cluster.rank_hint;
  run.node_name = config.run.node_name.empty() ? "node" + std::to_string(std::max(0, rank)) : config.run.node_name;
  run.run_dir = NodeRunDir(config.run, run.node_name);
}

// --resume of a run that trained all its epochs (a summary, and a checkpoint
// at the last epoch's end): true, after saying so; nothing is trained or
// rewritten.
bool FinishedAlready(const NodeRun& run, bool resume) {
  const std::string checkpoint = run.run_dir + "/checkpoint.safetensors";
  if (!resume || !fs::exists(run.run_dir + "/summary.json") || !fs::exists(checkpoint)) return false;
  Result<trainer::CheckpointInfo> at = trainer::ReadCheckpointPosition(checkpoint);
  if (!at || at->epoch < run.config.train.epochs || at->epoch_batches > 0) return false;
  CHORUS_LOG_INFO(Subsys::kNode, run.node_name, " finished this run already (", at->epoch, " of ",
                  run.config.train.epochs, " epochs, step ", at->step, "; ", run.run_dir,
                  "/summary.json): nothing to resume, and nothing rewritten. Raise train.epochs (--epochs) to "
                  "train on from its checkpoint.");
  return true;
}

// Creates the node's folder, takes its lock, and opens its log file there.
Status OpenRunDir(NodeRun& run) {
  std::error_code ec;
  fs::create_directories(run.run_dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create " + run.run_dir);
  CHORUS_ASSIGN_OR_RETURN(RunDirLock lock, RunDirLock::Acquire(run.run_dir));
  run.lock.emplace(std::move(lock));
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

// Joins the cluster (Clustered); the global batch is the sum of the members'.
Status JoinIfClustered(NodeRun& run, bool resume, const StopRequest& stop) {
  const Config& config = run.config;
  run.global_batch = config.train.batch_size;
  if (!Clustered(config)) return Status::Ok();
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
  // Augmented batches are transformed on the host, so the set stays there.
  const Status held = AugmentOptionsOf(config).Any() ? Status::Ok() : run.trainer->HoldTrainingSet(run.train);
  if (!held.ok()) {
    CHORUS_LOG_WARN(Subsys::kNode, run.node_name, ": the training set stays on the host (", held.ToString(),
                    "): each step gathers and uploads its batch");
  }
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
                        {"trace", run.run_dir + "/trace.json"},
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
  std::printf("  outputs         %s/ (metrics.jsonl, summary.json, trace.json, model.safetensors, "
              "checkpoint.safetensors, log.txt)\n",
              run.run_dir.c_str());
  std::fflush(stdout);
}

// A node the others removed (frozen, cut off), or a joiner whose training
// failed before it had the cluster's state (cut off while it took it, its part
// then held no member with the state): true when it joins again
// (cluster.rejoin), with the addresses to join through in *through. A joiner
// without the state has nothing of its own to lose. The removal may surface
// in the exchange before the control plane has heard of it: it is given the
// dead timeout to hear.
bool RejoinsAfterRemoval(const NodeRun& run, const NodeOptions& options, bool lacks_state) {
  if (options.rejoin_through == nullptr || !run.config.cluster.rejoin || !run.session || !run.session->control) {
    return false;
  }
  const ControlPlane& control = *run.session->control;
  if (std::string expelled = control.ExpelledSelf(); !expelled.empty()) {
    CHORUS_LOG_ERROR(Subsys::kNode, "the cluster expelled this node (", expelled, "): not joining it again");
    return false;
  }
  const Deadline heard = Deadline::AfterSeconds(run.config.cluster.dead_timeout_s);
  while (!lacks_state && !control.Removed() && !heard.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!lacks_state && !control.Removed()) return false;
  std::vector<std::string>& through = *options.rejoin_through;
  through = control.RejoinAddresses();
  auto add = [&](const std::string& address) {
    if (!address.empty() && std::find(through.begin(), through.end(), address) == through.end()) {
      through.push_back(address);
    }
  };
  for (const Member& m : run.session->view.members) {
    if (m.name != control.name()) add(m.control_address);
  }
  for (const std::string& address : run.config.cluster.bootstrap) add(address);
  return !through.empty();
}

// After training or its set-up failed with `why`: ends the exchange's threads
// (a pairwise responder, a fusion engine's), then the transport, so that
// nothing posts on it afterwards; true, logged, when this node joins again as
// a new process (RejoinsAfterRemoval).
bool EndToRejoin(NodeRun& run, const NodeOptions& options, const Status& why, bool lacks_state) {
  run.exchange.reset();
  if (run.session && run.session->transport) run.session->transport->EndForExit();
  if (!RejoinsAfterRemoval(run, options, lacks_state)) return false;
  CHORUS_LOG_WARN(Subsys::kNode, why.message(), ": rejoining the cluster as a new process through ",
                  JoinNames(*options.rejoin_through), " (cluster.rejoin)");
  return true;
}

}  // namespace

Status RejoinAsNewProcess(const std::vector<std::string>& through) {
  Result<std::string> cmdline = ReadFileText("/proc/self/cmdline");
  if (!cmdline) return cmdline.error().WithContext("rejoin: cannot read this process's command line");
  std::vector<std::string> args;
  for (size_t start = 0; start < cmdline->size();) {
    const size_t end = cmdline->find('\0', start);
    args.push_back(cmdline->substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (std::find(args.begin(), args.end(), "--resume") == args.end()) args.push_back("--resume");
  std::string list;
  for (const std::string& address : through) list += (list.empty() ? "" : ", ") + TomlQuote(address);
  // Join only: the node must not found a cluster of its own when the others
  // are out of reach for a while (a split shattered into single nodes).
  args.insert(args.end(), {"--set", "cluster.bootstrap=[" + list + "]", "--set", "cluster.join_only=true"});
  // The socket `chorus launch` handed to node0 closed with this process's
  // control plane, and its number may hold another file by now: the new
  // image serves the copy kept for it.
  ListenFdForRejoin();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The stop signals were blocked for every thread but a watcher that is
  // gone now: the new image starts from an empty mask, as a shell's child.
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv.data());
  return ErrnoStatus(errno, "rejoin: cannot start this node again");
}

int RunNode(const Config& config, const NodeOptions& options) {
  auto fail = [](const Status& s) {
    CHORUS_LOG_ERROR(Subsys::kNode, s.ToString());
    return 1;
  };
  NodeRun run(config);
  run.log_session = options.log_session;
  const bool named_by_rank = NamedByRank(config);
  if (!named_by_rank) {
    NameRunDir(run);
    if (FinishedAlready(run, options.resume)) return 0;
    if (Status s = OpenRunDir(run); !s.ok()) return fail(s);
  }
  StopRequest stop;
  if (Status s = stop.Start([log = options.log_session] { FlushForExit(log); }); !s.ok()) return fail(s);
  kernels::SetThreads(config.train.threads);
  if (Status s = LoadData(run); !s.ok()) return fail(s);
  if (Status s = JoinIfClustered(run, options.resume, stop); !s.ok()) {
    if (!RunEndedBeforeAdmission(s)) return fail(s);
    CHORUS_LOG_INFO(Subsys::kNode, "exiting without a model: ", s.message());
    return 0;
  }
  if (named_by_rank) {
    NameRunDir(run);
    CHORUS_LOG_INFO(Subsys::kNode, "no run.node_name: this node writes ", run.run_dir, " (its rank ", run.rank,
                    " in the cluster; its log file starts here)");
    if (Status s = OpenRunDir(run); !s.ok()) return fail(s);
  }
  if (Status s = BuildTraining(run, options.resume); !s.ok()) {
    // Removed while the members set up the exchange (frozen as they attached
    // shared memory): nothing trained yet, so it joins again as a new process.
    if (MemberLost(s) && EndToRejoin(run, options, s, /*lacks_state=*/false)) return kRunNodeRejoins;
    return fail(s);
  }

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
    if (EndToRejoin(run, options, finished.error(), loop.NeedsState())) return kRunNodeRejoins;
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
