// node/lab/simulate/: `chorus simulate`: many virtual nodes in one process over
// the in-process transport, in virtual time.
//
// `chorus simulate`: many virtual nodes (64 to 256) in one process, to see how
// gossip and all-reduce scale past one machine.
//
// Every virtual node is a thread with its own trainer, its own data shard and
// the same exchange a real node runs (AllreduceExchange / GossipExchange over a
// ClusterSession), whose transport is one slot of a LocalHub in virtual time:
// a node's clock moves by a modelled compute time per step and by the hub's
// latency-bandwidth link model on communication (local_transport.h). Wall time
// means nothing with 128 threads on 2 cores; every `time` written is virtual.
//
// Compute model: one step costs forward_backward_s (before the exchange's
// all-reduce) plus update_s (before gossip mixing), measured once per batch
// size on one thread of this machine (MeasureStepCompute) unless given (then
// for the base train.batch_size, and in proportion for other batches), times
// compute_scale, and for node i times 1 + compute_spread * i / (nodes - 1),
// divided by node i's speed (heterogeneity). Node profiles repeat cyclically:
// node i has speeds[i % speeds.size()] and batch_sizes[i % batch_sizes.size()]
// (speeds = {1, 1, 1, 0.25}: every fourth node 4x slower).
//
// Exchange model: bytes cost the link model's time; the CPU work the
// exchanges do (codecs, sums, averaging) costs its thread CPU time on this
// machine times exchange_cpu_scale, measured inside the exchange hooks on the
// node's thread and on the exchange's helper threads (the all-reduce's
// communication thread) and added to the node's clock before the transport
// call that follows it (exchange_cpu_meter.h). That time is measured, so
// virtual times differ a little between runs; exchange_cpu_scale = 0 leaves it
// out, and then the same options give the same virtual times.
//
// Output (the run-directory contract, docs in report_data.h):
// <out_dir>/compare.json ("kind": "simulate") and <out_dir>/<method>/node<i>/
// metrics.jsonl + summary.json. Only `eval_nodes` nodes (spread over the ranks)
// evaluate during training, at `evals` evenly spaced steps on the first
// `eval_samples` test images; every node evaluates its final model there.
//
// Asynchronous pairwise gossip answers requests from a responder thread per
// node; its hub orders every event in virtual time (event_order.h: an answer
// carries what the node held at the moment the request arrived there, and
// requests are taken in the order they arrive), so that the same options
// give the same virtual times for it too. Its nodes train equal step counts
// (no control plane paces them; train.stop = "samples" acts as "epochs").
//
// Not supported, with the reason in the error: the complete-graph local SGD
// of `chorus compare` past 32 nodes (every node holds n - 1 full inboxes: n^2
// vectors in memory); local-sgd-hypercube is the scalable local SGD.
//
// Must not: sleep, read the wall clock for anything it reports (except
// wall_seconds), or write outside out_dir.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "node/lab/compare/compare_config.h"
#include "node/config/config.h"

namespace chorus::node {

struct SimulateOptions {
  // Settings every virtual node starts from (model, precision, optimizer, lr,
  // batch_size, epochs, seed, data.dir, data.train_limit); each method's
  // overrides are applied on top, and the simulator sets train.threads = 1,
  // exchange.on_failure = "stop" and fabric.op_timeout_s = timeout_s.
  Config base;
  int nodes = 128;                       // virtual nodes per method, >= 2
  std::vector<CompareMethod> methods;    // SimulateMethods(...)
  std::string out_dir = "runs/sim-128";  // the comparison directory
  double target_accuracy = 0.8;          // "time to target" column
  // Link model, as written (for compare.json) and parsed.
  std::string latency = "50us";
  std::string bandwidth = "10gbit";
  double latency_s = 50e-6;
  double bytes_per_second = 1.25e9;
  // Sites: node i in site i % sites (cluster.site "site<k>"), so that the
  // ranks alternate between them; messages between sites also cross their
  // site's uplink of site_bytes_per_second, and site_latency_s more
  // (LocalVirtualTime). 1: one site.
  int sites = 1;
  std::string site_link;  // as written: "100mbit 50ms"
  double site_latency_s = 0.0;
  double site_bytes_per_second = 0.0;
  // Compute model (file comment). Both <= 0: measure.
  double forward_backward_s = 0.0;
  double update_s = 0.0;
  double compute_scale = 1.0;   // > 0
  double compute_spread = 0.0;  // >= 0
  // Node profiles (file comment), repeated cyclically over the nodes; empty:
  // none. speeds: each > 0 (1: this machine, 0.25: 4x slower, 2: twice as
  // fast); batch_sizes: each >= 1, node i's train.batch_size.
  std::vector<double> speeds;
  std::vector<int> batch_sizes;
  double exchange_cpu_scale = 1.0;  // >= 0; 0: the exchanges' CPU work costs no time
  // LARS's trust ratio on every node from the norm of the members' mean
  // gradient, as an all-reduce node's (mean_gradient_barrier.h): what a
  // method would reach if its nodes knew it. Lock-step methods only; the
  // barrier's waits are not virtual time, so the times are not comparable.
  bool exact_lars_norm = false;
  // Evaluation (file comment).
  int eval_nodes = 4;     // >= 1; clamped to nodes
  int evals = 0;          // evaluation points during training; 0: four per epoch (at least 4)
  int eval_samples = 1000;  // >= 1; clamped to the test set
  int log_points = 10;    // about this many metrics records per node (plus epoch ends)
  double timeout_s = 600.0;  // wall-clock deadline of any one wait
  bool print_progress = true;  // one line per method on stdout
};

// One method's outcome.
struct SimulatedMethod {
  CompareMethod method;
  int exit_code = 0;           // 0: every node finished
  std::string error;           // the first node error, when exit_code != 0
  double wall_seconds = 0.0;   // real time the method took (threads, evaluation, files)
  std::vector<nlohmann::json> summaries;  // per node (rank order); empty on failure
};

struct SimulationResult {
  std::string out_dir;
  double forward_backward_s = 0.0;  // per step, at the base batch at speed 1 (after compute_scale)
  double update_s = 0.0;
  bool compute_measured = false;
  std::vector<SimulatedMethod> methods;
  nlohmann::json compare;           // what compare.json holds
};

// The modelled compute of one step of `config`'s model at its batch size, on one
// thread: median over `steps` timed steps after 2 warm-up steps, on synthetic data.
struct StepCompute {
  double forward_backward_s = 0.0;
  double update_s = 0.0;
};
[[nodiscard]] Result<StepCompute> MeasureStepCompute(const Config& config, int steps = 9);

// The methods `chorus simulate` runs by default: ring-allreduce, tree-allreduce,
// dpsgd-ring, dpsgd-one-peer-exp, choco-sign, local-sgd-hypercube.
std::vector<std::string> DefaultSimulateMethodNames();
// The methods named in `names` (built-in compare methods plus
// local-sgd-hypercube; "default" expands to the default list), checked for
// `nodes` virtual nodes: unknown names and the unsupported methods of the file
// comment are InvalidArgument naming the method and why.
[[nodiscard]] Result<std::vector<CompareMethod>> SimulateMethods(const std::vector<std::string>& names,
                                                                 int nodes);

// Node `node`'s speed and train.batch_size under `options`' profiles.
double NodeSpeed(const SimulateOptions& options, int node);
int NodeBatchSize(const SimulateOptions& options, int node);

// Runs every method in turn, writes the files and returns what was written.
// Fails only on bad options or when the output cannot be written; a method
// whose nodes fail is recorded with its exit code and error, and the next runs.
[[nodiscard]] Result<SimulationResult> RunSimulation(const SimulateOptions& options);

}  // namespace chorus::node
