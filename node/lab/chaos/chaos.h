// node/lab/chaos/: `chorus chaos`: a training cluster run through the launcher
// while a seeded schedule of faults hits it, and what the cluster made of them.
//
// `chorus chaos CONFIG --nodes N --minutes M --faults kill,stop,restart,partition
// --mtbf S --seed K`: first a fault-free run of the same cluster for --baseline-seconds
// measures its training rate (and a second one after the chaos run, unless a
// signal ended it: the throughput retained is against the mean of the two, as
// a shared host's speed drifts over half an hour); the chaos run then trains for about M minutes of
// that rate (train.epochs from it) while faults arrive S seconds apart on
// average (exponential gaps), from the cluster's formation until M minutes:
//   kill     kill -9 of a random running node, node0 (the bootstrap) included;
//            one time in four two nodes at once
//   stop     SIGSTOP of a random node for a random time (up to --max-freeze),
//            then SIGCONT: a frozen or swapping process
//   restart  a dead node started again under its name: it rejoins the cluster
//   partition  a random node cut off from the others for a random time (up to
//            --max-partition), then joined again. Root only: then every node
//            runs in a network namespace of its own (node/launch/emulated_link.h),
//            the fault-free run too, and the cut is its switch port going down.
// At least --min-running nodes keep training whatever the schedule draws.
// When the faults end, every node it killed is started again (as a supervisor
// would; a node that ended by itself is a failure and stays down), and the
// cluster trains on at full strength until the epochs are done.
//
// The schedule (times, kinds, victims, freeze lengths) is a function of the
// seed, the node count and the options alone, so a run replays from its seed;
// where the cluster differs from the plan (a node ended by itself), the fault
// is skipped and said.
//
// It prints one line per fault (what, whom, when, and how long until the
// cluster trained again), and a summary line: faults injected and survived,
// hangs (no trained step anywhere for longer than --hang-bound), divergent
// replicas at the end, throughput retained against the fault-free rate, and
// the final models' checksums. chaos.jsonl in the run folder has the faults
// and the cluster's samples/s and running nodes over time (`chorus report`
// draws them). When no node trains for --hang-bound seconds, the threads'
// stacks of every running node are written to <output>/hang<k>/node<i>.txt
// (with gdb, where it is installed), so that a hang found once can be read.
//
// Layout: <output>/baseline/node<i>/ and <output>/baseline-after/node<i>/,
// <output>/chaos/node<i>/ (first starts),
// <output>/restart<k>/node<i>/ (the k-th restart), <output>/chaos.jsonl,
// <output>/launch.log (the nodes' lines).
//
// Must not: know how nodes train (it reads their metrics.jsonl and
// summary.json) or fault anything but the processes it launched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/status.h"

namespace chorus::node {

enum class FaultKind { kKill, kStop, kRestart, kPartition };
inline constexpr EnumName<FaultKind> kFaultKindNames[] = {{FaultKind::kKill, "kill"},
                                                          {FaultKind::kStop, "stop"},
                                                          {FaultKind::kRestart, "restart"},
                                                          {FaultKind::kPartition, "partition"}};

// The kinds of chaos.jsonl's lines (their "kind"), written by RunChaos and
// read by `chorus report`.
enum class ChaosRecord { kFault, kSample, kSelfEnded, kRevive, kHang, kSummary };
inline constexpr EnumName<ChaosRecord> kChaosRecordNames[] = {{ChaosRecord::kFault, "fault"},
                                                              {ChaosRecord::kSample, "sample"},
                                                              {ChaosRecord::kSelfEnded, "self_ended"},
                                                              {ChaosRecord::kRevive, "revive"},
                                                              {ChaosRecord::kHang, "hang"},
                                                              {ChaosRecord::kSummary, "summary"}};

// One fault of a schedule: at `at_s` seconds after the cluster formed.
struct PlannedFault {
  double at_s = 0.0;
  FaultKind kind = FaultKind::kKill;
  std::vector<int> nodes;   // the victims (kill: one or two; the others: one)
  double duration_s = 0.0;  // stop: until SIGCONT; partition: until healed
};

struct ChaosPlanOptions {
  int num_nodes = 4;
  double horizon_s = 300.0;  // faults arrive in [first_fault_s, horizon_s)
  double first_fault_s = 5.0;
  double mtbf_s = 20.0;
  std::vector<FaultKind> kinds = {FaultKind::kKill, FaultKind::kStop, FaultKind::kRestart};
  uint64_t seed = 1;
  int min_running = 2;  // nodes neither dead nor frozen, whatever is drawn
  double max_freeze_s = 10.0;
  double max_partition_s = 15.0;
};

// The schedule for `options`: the same for the same options. Arrivals where no
// enabled kind is possible (every node needed, none dead) are dropped.
std::vector<PlannedFault> PlanFaults(const ChaosPlanOptions& options);

// "kill,stop" -> kinds; errors name the unknown one.
Result<std::vector<FaultKind>> ParseFaultKinds(const std::string& text);

struct ChaosOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // "key=value" for every node
  double minutes = 5.0;        // faults arrive for this long after formation
  double train_minutes = 0.0;  // the training is sized to last this long at the fault-free rate; 0: minutes
  double baseline_s = 60.0;   // the fault-free run; 0: none (no throughput figure)
  double hang_bound_s = 60.0;
  std::string output_dir = "runs/chaos";
  std::string executable = "/proc/self/exe";
  bool verbose = false;       // node lines to the console, not launch.log
  double base_lr = 0.0;       // the nodes' train.base_lr (the config with the overrides): for a warning only
  ChaosPlanOptions plan;      // horizon_s is set from minutes
};

struct FaultOutcome {
  PlannedFault fault;
  bool injected = false;
  std::string skipped;        // why not, when not injected
  double recovery_s = -1.0;   // until a trained step after it; < 0: none seen
  double first_step_s = -1.0; // restart: until the restarted node's first step
};

struct ChaosSummary {
  std::vector<FaultOutcome> faults;
  int injected = 0;
  int survived = 0;            // the cluster trained again after it
  int unjudged = 0;            // training ended before any step after it, with no hang
  int hangs = 0;               // stalls longer than hang_bound_s
  double longest_stall_s = 0.0;
  int ended_by_themselves = 0; // nodes that exited non-zero or crashed on their own: failures
  int finished_nodes = 0;      // final incarnations that exited 0
  int divergent = 0;           // of those, replicas unlike the most common one
  std::vector<std::string> checksums;  // per finished node, "node2=123..."
  // The finished replicas' final test accuracy (summary.json); < 0: none.
  // Agreeing replicas of a model that collapsed show here, not as divergence.
  double min_accuracy = -1.0;
  double max_accuracy = -1.0;
  double baseline_samples_per_s = 0.0;  // the mean of the fault-free runs before and after
  double baseline_before_samples_per_s = 0.0;
  double baseline_after_samples_per_s = 0.0;
  double samples_per_s = 0.0;  // the chaos run, from formation to its end
  double retained = -1.0;      // samples_per_s / baseline; < 0: no baseline
  double chaos_seconds = 0.0;
  std::string line;            // the summary line as printed

  // No hang, no divergent replica, no node that ended by itself, and a
  // finished node: what `chorus chaos` exits 0 for.
  bool Passed() const { return hangs == 0 && divergent == 0 && ended_by_themselves == 0 && finished_nodes > 0; }
};

// Runs the baseline and the chaos run. Errors: a bad config or options, or a
// cluster that could not start at all.
[[nodiscard]] Result<ChaosSummary> RunChaos(const ChaosOptions& options);

}  // namespace chorus::node
