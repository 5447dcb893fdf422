// One virtual node of `chorus simulate` (simulate.h): a trainer, its data
// shard and the exchange a real node would run, over one slot of a LocalHub in
// virtual time. It runs a real node's training loop (node/run/training_loop.h)
// on a virtual clock:
//
//   clock += forward_backward_s; BeforeStep; ForwardBackward; AfterBackward
//   clock += update_s;           ApplyUpdate; AfterUpdate
//
// so an all-reduce starts when the modelled backward ends (no overlap with
// compute is modelled) and gossip mixes after the modelled update. With a
// cpu_meter the exchange's own CPU work (codecs, sums, averaging) moves the
// clock too (exchange_cpu_meter.h). Records carry the slot's virtual clock as
// `time`; evaluation costs no virtual time.
//
// Must not: read the wall clock for anything it writes, sleep, or touch another
// node's state (everything shared is const, or the hub, or the EvalCache).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gossip/transport/local/local_transport.h"
#include "node/lab/simulate/consensus_board.h"
#include "node/lab/simulate/mean_gradient_barrier.h"
#include "node/lab/simulate/exchange_cpu_meter.h"
#include "node/config/config.h"
#include "trainer/dataset.h"
#include "trainer/trainer.h"

namespace chorus::node {

// Final evaluations shared by the nodes of one method, keyed by the parameter
// checksum: replicas that ended bitwise equal (all-reduce, or gossip after an
// exact consensus average) are evaluated once. Thread-safe.
class EvalCache {
 public:
  // The cached result for `checksum` (trainer.ParameterChecksum()), or
  // evaluates `trainer` on `data` and caches it.
  [[nodiscard]] Result<trainer::EvalResult> Evaluate(trainer::Trainer& trainer,
                                                     const trainer::Dataset& data,
                                                     uint64_t checksum);

 private:
  std::mutex mu_;
  std::map<uint64_t, trainer::EvalResult> results_;
};

// The samples every node has trained so far, for train.stop = "samples"
// (TrainingLoop's cluster_samples). Read at a node's turn in virtual time
// (event_order.h), the total counts every step that ended before that
// moment: the budget stops the nodes at one virtual moment, each after as
// many steps as its speed allowed. Thread-safe.
class SampleLedger {
 public:
  explicit SampleLedger(int nodes) : own_(static_cast<size_t>(nodes), 0) {}
  // Node `rank` has trained `own` samples; returns every node's sum.
  uint64_t Report(int rank, uint64_t own);

 private:
  std::mutex mu_;
  std::vector<uint64_t> own_;
};

struct VirtualNodeSpec {
  const Config* config = nullptr;  // the method's resolved config at this node's batch (shared, read-only)
  int rank = 0;
  int world_size = 1;
  int sites = 1;  // rank r in site r % sites (SimulateOptions::sites)
  // Every rank's train.batch_size (world_size entries; shared, read-only);
  // null: every rank trains config->train.batch_size.
  const std::vector<int>* batch_sizes = nullptr;
  std::shared_ptr<gossip::LocalHub> hub;  // virtual time on; slot == rank
  const trainer::Dataset* train = nullptr;  // the whole training set (the sampler shards it)
  const trainer::Dataset* eval_set = nullptr;  // test images for every evaluation
  double forward_backward_s = 0.0;  // this node's modelled compute per step
  double update_s = 0.0;
  std::vector<int64_t> eval_steps;  // evaluate after these step counts (ascending)
  int64_t log_every = 1;            // metrics record every this many steps (>= 1)
  std::string dir;                  // <out>/<method>/node<rank>
  EvalCache* final_eval = nullptr;  // shared by the method's nodes (may be null)
  double spectral_gap = -1.0;       // gossip: the graph's gap, computed once (< 0: per node)
  // Charges the exchange's CPU work to this node's clock; installed in the
  // hub (ExchangeCpuMeter::Install). Null: only bytes cost communication time.
  ExchangeCpuMeter* cpu_meter = nullptr;
  // Every node's copies at the evaluation steps: the exact consensus distance
  // of any method (may be null: not measured).
  VirtualConsensusBoard* board = nullptr;
  // The hub orders every event (event_order.h): the node leaves its copies
  // on the board but does not wait there for the others' (the simulation
  // fills the distances in afterwards).
  bool ordered = false;
  // Shared by the method's nodes when they train at their own pace under a
  // sample budget (ordered events only); null: equal step counts.
  SampleLedger* ledger = nullptr;
  // Every node's gradient meets the others' here each step, and LARS takes
  // the norm of their mean (SimulateOptions::exact_lars_norm); null: its own.
  MeanGradientBarrier* mean_gradient = nullptr;
};

// Trains one virtual node to the end (consensus phase and final evaluation
// included), writes dir/metrics.jsonl and dir/summary.json (with
// exchange_cpu_seconds, the CPU time charged to its clock) and returns the
// summary. Errors name the node.
[[nodiscard]] Result<nlohmann::json> RunVirtualNode(const VirtualNodeSpec& spec);

}  // namespace chorus::node
