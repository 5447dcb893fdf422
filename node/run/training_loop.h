// The one training loop of a node, real (`chorus node`, RunNode) or virtual
// (`chorus simulate`), read as named steps:
//
//   Resume             a joiner: the live state from a member (MembershipTransitions::Joined);
//                      --resume: the checkpoint, then the step the cluster agrees on
//   for each step:     StopsBefore       a stop signal: StopWithCheckpoint, and return
//                      FollowMembership  a new membership: the rest of the epoch re-partitioned
//                                        by the members' batches, the sample weights
//                      AdmitIfDue        at an admission point: joiners come in (MembershipTransitions::Admit)
//                      BalanceIfDue      train.balance = "time": the global batch re-split by speed
//                      NextBatch         the sampler's (at its own pace: until the cluster's count)
//                      TrainStep         the exchange's hooks around forward/backward and update
//                      RecordWindow      every log_every steps: loss, lr, samples/s
//                      EvaluateIfDue     after the steps the evaluation plan names
//   at an epoch's end: EndEpoch          evaluation of the whole test set, checkpoint
//   at the end:        Summarise         exchange Finish (consensus), final evaluation,
//                                        model file, the summary's fields
//
// The steps with the other members (Resume, AdmitIfDue, FollowMembership,
// BalanceIfDue) are in training_loop_cluster.cc.
//
// A real node and a virtual one differ only in their LoopSetup: the clock
// (wall or virtual), the evaluation plan, and what only a real node has (stop
// signals, progress display, checkpoints, trace, model file).
//
// Must not: parse configs, build exchanges or know their internals, or write
// a file that a reader could see half-written (metrics.jsonl is appended a
// line at a time; checkpoints and the model are written atomically).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "node/cluster/cluster_session.h"
#include "node/cluster/live_state.h"
#include "node/config/config.h"
#include "node/exchange/exchange.h"
#include "node/outputs/metrics.h"
#include "node/outputs/sample_record.h"
#include "node/outputs/trace.h"
#include "node/run/progress_display.h"
#include "node/run/stop_signals.h"
#include "trainer/augment.h"
#include "trainer/batch_sampler.h"
#include "trainer/checkpoint.h"
#include "trainer/dataset.h"
#include "trainer/trainer.h"

namespace chorus::node {

// The time a node's records and summary carry, and what its steps' compute
// costs on that clock.
class StepClock {
 public:
  virtual ~StepClock() = default;
  // Seconds on this clock.
  virtual double Now() = 0;
  // Before a step's forward/backward of `samples` images, after it
  // (`measured_s`: its wall seconds), and before its update.
  virtual void ComputeStarts(int /*samples*/) {}
  virtual void ComputeEnded(double measured_s) = 0;
  virtual void UpdateStarts() {}
  // The compute of the steps so far, in this clock's seconds.
  double compute_seconds() const { return compute_seconds_; }

 protected:
  double compute_seconds_ = 0.0;
};

// A real node's clock: the wall clock, and straggler emulation (train.slowdown:
// sleep that multiple of each step's compute). The compute slept on is the
// step's wall time, but at most 4 times the CPU time the process used
// meanwhile (all its threads: the compute may run on others than the
// caller's): waiting for a CPU on a host shared up to 4 ways counts, as the
// straggler's own slowness, while a node stopped mid-step (SIGSTOP, no CPU at
// all) does not then sleep slowdown times the stop.
class WallClock final : public StepClock {
 public:
  explicit WallClock(double slowdown) : slowdown_(slowdown) {}
  double Now() override;
  void ComputeStarts(int samples) override;
  void ComputeEnded(double measured_s) override;

 private:
  double slowdown_;
  double cpu_at_start_ = 0.0;
};

// When the loop evaluates, besides the final evaluation.
struct EvalPlan {
  const trainer::Dataset* step_set = nullptr;  // the test images of evaluations after steps
  int every_steps = 0;                         // after every N steps but an epoch's last (0: none)
  std::vector<int64_t> at_steps;               // and after these step counts (ascending)
  // At epoch ends, on the whole test set: after the last epoch, and after
  // every `every_epochs` epochs (0: the last only).
  bool at_epoch_ends = false;
  int every_epochs = 0;
};

// Everything the loop uses; pointers marked "may be null" are what a virtual
// node does without.
struct LoopSetup {
  const Config* config = nullptr;
  trainer::Trainer* trainer = nullptr;
  Exchange* exchange = nullptr;
  MetricsWriter* metrics = nullptr;
  StepClock* clock = nullptr;
  const trainer::Dataset* train = nullptr;  // the whole training set (the sampler shards it)
  const trainer::Dataset* test = nullptr;   // the final evaluation's images
  std::string node_name;
  int rank = 0;
  int world_size = 1;
  // Every rank's batch where there is no cluster session (the simulator's
  // virtual nodes); empty: world_size x train.batch_size.
  std::vector<int> batch_sizes;
  EvalPlan evals;
  int64_t log_every = 1;             // a metrics record every this many steps (>= 1)
  bool record_epoch_ends = false;    // and one at each epoch's last step
  bool checksum_in_records = false;  // parameter_checksum in each record (a hash of every weight)
  // The final evaluation (after Finish); null: trainer.Evaluate(*test).
  std::function<Result<trainer::EvalResult>(trainer::Trainer&, uint64_t checksum)> final_evaluation;
  // The simulator's exact consensus distance, measured outside the exchange:
  // after_step(steps done, master) after every step, and exact_distance(steps
  // done) at each evaluation instead of Exchange::ExactConsensusDistance
  // (< 0: not measured). Null: the exchange's.
  std::function<void(int64_t, std::span<const float>)> after_step;
  std::function<double(int64_t)> exact_distance;
  // And trained(steps done, master) once the last step is done, before the
  // exchange's Finish (its consensus phase) changes the weights.
  std::function<void(int64_t, std::span<const float>)> trained;
  // The simulator's sample budget: the cluster's samples so far, given this
  // node's own (each node reports its own at every call). Set, and with
  // train.stop = "samples" under an exchange whose steps run apart, the node
  // trains at its own pace without a control plane. Null: the control plane's.
  std::function<uint64_t(uint64_t own_samples)> cluster_samples;

  // A real node's: may be null.
  ClusterSession* session = nullptr;    // resume and stop agreement run over its control plane
  const StopRequest* stop = nullptr;    // SIGINT / SIGTERM
  ProgressDisplay* progress = nullptr;
  TraceWriter* trace = nullptr;         // compute spans
  bool resume = false;                  // --resume from checkpoint_path
  std::string checkpoint_path;          // "": no checkpoints
  std::string model_path;               // "": no model file
  int checkpoint_every_epochs = 0;      // and after the last epoch
};

// The membership of a node that trains with others (two or more members),
// else null: what the loop's collective steps (resume, stop, balancing) run over.
const MembershipView* ClusterView(const ClusterSession* session);

// How a node paces its steps and meets membership changes (docs/design.md,
// "Membership modes"). kLockstep: every member runs the same steps over one
// partition of the data, and membership changes at admission points that
// every member attends. kOwnPace: each node trains as fast as it can over its
// own order of the data until the cluster's sample counter reaches the
// budget; nothing waits for every member (joiners are admitted only while
// they wait). A property of the cluster's configuration, never of the view a
// node happened to form in: the same whatever the start order and
// cluster.min_nodes.
enum class Pacing { kLockstep, kOwnPace };
// kOwnPace for a cluster node under train.stop = "samples" and an exchange
// whose steps run apart (MembershipTransitions::StepsRunApart), else
// kLockstep. A cluster node has a session with a control plane, or (the
// simulator's) a sample counter of its own (`own_sample_counter`:
// LoopSetup::cluster_samples).
Pacing PacingOf(const Config& config, Exchange& exchange, const ClusterSession* session,
                bool own_sample_counter = false);

// The steps per epoch of a cluster whose batches sum to `global_batch`
// (BatchSampler's rule: every member runs floor(train_images / global_batch)).
// InvalidArgument, naming where train.batch_size was set, when that is no step.
[[nodiscard]] Result<int64_t> ClusterStepsPerEpoch(const Config& config, int train_images, int global_batch);

// train.balance = "time": steps between two splits of the global batch,
// train.balance_every_steps; under an outer optimizer the first multiple of
// exchange.outer.period at least that long, so that the speeds are gathered
// right after a sync, where the members stand together anyway.
int64_t BalanceInterval(const Config& config);
// Whether the speeds are gathered before step `step` (steps done): every
// BalanceInterval steps from the first interval on, and under streaming
// syncs (exchange.outer.delay) that many steps after the sync, when the last
// fragment's sync has landed and the next has not begun (delay < period /
// fragments), so that no sync's communication runs beside the gather.
bool BalanceDue(const Config& config, int64_t step);

// train.balance = "time": `global_batch` split in proportion to `speeds`
// (one per rank), each rank at least 1, the rest by largest remainder (ties
// to the lower rank): the same on every member for the same speeds. Empty
// when a speed is not positive and finite, or the batch has fewer samples
// than ranks.
std::vector<int> SplitBySpeed(int global_batch, const std::vector<double>& speeds);

// Where the step whose batch `sampler` handed out last stands on the
// learning-rate schedule (lr_schedule.h), in the schedule's steps of
// `steps_per_epoch` per epoch: the epoch plus the fraction of the epoch's
// samples (all ranks') taken before that step. The same on every rank
// whatever its batch, and the step count where the epoch's partition never
// changed.
double SchedulePositionOf(const trainer::BatchSampler& sampler, int epoch, int64_t steps_per_epoch);

// data.augment_*: how the training batches are transformed (none by default),
// seeded by train.seed.
trainer::AugmentOptions AugmentOptionsOf(const Config& config);

// The loop is the node's LiveState (live_state.h): a joiner's state is its
// trainer's checkpoint with where the loop stands.
class TrainingLoop final : public LiveState {
 public:
  explicit TrainingLoop(LoopSetup setup) : s_(std::move(setup)) {}

  // Trains to the end and returns the summary (SummaryHeader's fields, times,
  // throughput, the final evaluation, the checksum); or nothing when a stop
  // signal ended it early (stopped_by()): then it wrote a checkpoint of where
  // it stood, for --resume.
  [[nodiscard]] Result<std::optional<nlohmann::json>> Run();
  // The signal the loop stopped for, else 0.
  int stopped_by() const { return stopped_by_; }

  // LiveState.
  bool NeedsState() const override { return needs_live_state_; }
  void NeedState() override { needs_live_state_ = true; }
  int64_t NextStep() const override { return step_; }
  [[nodiscard]] Result<std::vector<uint8_t>> Capture(int64_t next_step) override;
  [[nodiscard]] Status Restore(std::span<const uint8_t> bytes, const std::string& from) override;
  void PutBackStep() override;

 private:
  struct Window {  // the steps since the last record
    double start = 0.0;
    int64_t samples = 0, steps = 0;
    double loss = 0.0;
  };

  Status Resume();
  // A node that joined a running cluster: the live state from a member.
  Status JoinRunning();
  // --resume: the checkpoint; in a cluster that stopped together, one step.
  Status ResumeFromCheckpoint();
  bool StopsBefore();
  // At an admission point (cluster.admit_every_s / admit_every_steps), the
  // members meet; when the coordinator admits joiners, the exchange re-forms
  // with them and they take the live state.
  Status AdmitIfDue();
  // The membership changed since the data was partitioned: the rest of the
  // epoch is re-partitioned over the current members, and the schedule's
  // global batch follows them; the next admission point is
  // cluster.admit_every_steps ahead. Not while catching up (steps_to_catch_up_).
  Status FollowMembership();
  // Nodes whose steps run apart never meet: each follows every newer view of
  // the control plane on its own between its steps (ControlPlane::AdmitOnItsOwn).
  Status FollowViewOnItsOwn();
  // The admission of the view after an admission point at `epoch` (or its
  // failure, logged: the exchange's next operation re-forms).
  Status AdmitInto(const Result<MembershipView>& met, uint64_t epoch);
  // train.balance = "time": every BalanceInterval steps, the global batch
  // re-split by the members' measured speeds.
  Status BalanceIfDue();
  // Every rank's train.batch_size in the current membership.
  std::vector<int> MemberBatches() const;
  // This node's rank in the current membership (the setup's without a cluster session).
  int SelfRank() const;
  // The sum of shares_: the global batch the schedule scales by.
  int GlobalBatch() const;
  // This node's sample weight (Trainer::SetSampleWeights) as the exchange applies it.
  void ApplySampleWeights();
  // The samples the cluster trained: this node's alone unless it trains at
  // its own pace (then every member's: ControlPlane::ClusterSamples, a lower
  // bound that the stop uses so the cluster trains at least its budget, or
  // with `estimate` ClusterSamplesEstimate, which the schedule follows).
  uint64_t ClusterSamples(bool estimate = false) const;
  // The next batch of this epoch; false when the epoch is done. A node that
  // trains at its own pace starts its next pass over the data when its pass
  // ends, and its epoch ends when the cluster's samples reach the epoch's end.
  bool NextBatch(trainer::Batch* batch);
  bool EpochDone() const;
  // The checkpoint fields of where the loop stands, `next_step` next.
  trainer::CheckpointInfo Position(int64_t next_step) const;
  // Merges a checkpoint's or a live state's sample counter into the control
  // plane's (free-running only; `from` names it in an error).
  Status MergeSampleCounts(const trainer::CheckpointInfo& info, const std::string& from);
  // This step's place on the learning-rate schedule (lr_schedule.h).
  double SchedulePosition() const;
  // Before each batch: the control plane's verdict (removed), then
  // FollowMembership, AdmitIfDue and BalanceIfDue.
  Status WithTheCluster();
  // After a step that was applied: counts, progress, records, evaluation.
  Status AfterStep(int epoch, const trainer::ForwardBackwardResult& pass, const trainer::UpdateResult& update);
  // Forward and backward of one step, timed on the node's clock (with the
  // exchange's BeforeStep when `with_exchange`).
  Status ForwardBackward(const trainer::Batch& batch, bool with_exchange, trainer::ForwardBackwardResult* pass);
  // One step without the exchange, to catch up with the others (steps_to_catch_up_).
  Status CatchUpStep(const trainer::Batch& batch, trainer::ForwardBackwardResult* pass, trainer::UpdateResult* update);
  // One step; `*abandoned` when a re-form replaced its update.
  Status TrainStep(const trainer::Batch& batch, trainer::ForwardBackwardResult* pass,
                   trainer::UpdateResult* update, bool* abandoned);
  void ShowProgress(int epoch, int64_t i, const trainer::ForwardBackwardResult& pass);
  Status RecordWindow(int epoch, bool epoch_end, const trainer::UpdateResult& update);
  Status EvaluateIfDue(int epoch, bool epoch_end);
  Status StopWithCheckpoint(int epoch, int64_t i);
  Status EndEpoch(int epoch);
  Result<nlohmann::json> Summarise();
  // A record's fields every record has; `epoch` as the record counts it.
  nlohmann::json BaseRecord(int epoch) const;
  Status Evaluate(const trainer::Dataset& set, int epoch, bool whole_test_set);
  // The records of the consensus measurements that ended beside training
  // (Exchange::StartConsensusMeasurement): each the record of the moment it
  // started, with consensus_distance_exact and consensus_point (the epochs
  // done, the same on every member); with `wait`, the one in progress first.
  Status AppendConsensusMeasurements(bool wait);

  struct BalanceWindow {  // the compute since the last split (BalanceIfDue)
    double seconds = 0.0;
    int64_t samples = 0;
  };

  LoopSetup s_;
  std::optional<trainer::BatchSampler> sampler_;
  // Pacing::kOwnPace (PacingOf): each node trains at its own pace until the
  // cluster's samples reach the budget.
  bool free_running_ = false;
  std::vector<int> shares_;      // every rank's batch (the sampler's, unless free-running)
  uint64_t followed_epoch_ = 0;  // the membership the shares follow
  // Free-running after --resume from a checkpoint without the cluster's
  // sample counter (an older build's): the epochs done before.
  uint64_t resumed_samples_ = 0;
  BalanceWindow balance_;
  int64_t step_ = 0;            // steps run so far: the next step's number
  int start_epoch_ = 0;
  int epoch_ = 0;               // the epoch in progress
  bool positioned_ = false;     // the sampler stands inside start_epoch_ already (resume, live state)
  bool needs_live_state_ = false;
  // The sampler stands on another member's shard (a checkpoint's or a
  // sender's position, restored as rank 0): FollowMembership cuts this
  // node's shard of what is left, also where the membership is the same.
  bool foreign_shard_ = false;
  int64_t last_admission_step_ = -1;
  int64_t next_admission_step_ = 0;  // agreed with the members (AdmitIfDue)
  int64_t rate_since_step_ = 0;      // this node's steps per second since then
  double rate_since_time_ = 0.0;
  int64_t steps_to_catch_up_ = 0;   // steps to train without the exchange (CatchUpStep) before the agreed one
  double t_start_ = 0.0;
  double eval_seconds_ = 0.0;   // evaluations, kept out of `time`
  // The records of the measurements started beside training, by point.
  std::map<int64_t, nlohmann::json> consensus_records_;
  int64_t samples_done_ = 0;
  double last_loss_ = 0.0;
  size_t next_at_step_ = 0;     // EvalPlan::at_steps
  Window window_;
  int stop_timeouts_ = 0;       // StopsBefore's
  std::unique_ptr<SampleRecord> sample_record_;  // CHORUS_RECORD_SAMPLES_DIR; lock step only
  int stopped_by_ = 0;
};

}  // namespace chorus::node
