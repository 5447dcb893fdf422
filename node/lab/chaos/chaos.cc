// `chorus chaos`: see chaos.h. The launcher runs the nodes; this file plans the
// faults, injects them from the launcher's tick, and reads what the nodes
// write (metrics.jsonl as it grows, summary.json at the end).
#include "node/lab/chaos/chaos.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "node/config/config_describe.h"
#include "node/launch/emulated_link.h"
#include "node/lab/chaos/chaos_watch.h"
#include "node/launch/launcher.h"

namespace chorus::node {
namespace {

using chaos::Clock;
using chaos::Instance;
using chaos::Seconds;
using chaos::Watch;
namespace fs = std::filesystem;

// Metrics records every this many steps: recovery is measured in them.
constexpr int kLogEverySteps = 10;
// Warm-up excluded from the fault-free rate (JIT, first allocations).
constexpr double kBaselineWarmupShare = 0.2;
// What a fault needs beyond its length to be survived before the training
// ends: detection, a re-form or rejoin, and a trained step (a restart's
// first step took 4-5 s on 2 cores).
constexpr double kRecoveryAllowanceS = 10.0;
// A schedule stretched past this many epochs at a base learning rate above
// kStretchedBaseLr gets a warning: the examples' LARS recipe (base_lr 2.0,
// tuned for a few epochs) collapsed the MLP to 10% over hundreds of epochs
// under ring all-reduce and pairwise gossip, fault-free too, and 0.5 trained
// stably (docs/performance.md, "Chaos runs").
constexpr int kStretchedEpochs = 30;
constexpr double kStretchedBaseLr = 0.5;

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The warning for a schedule stretched over `epochs` at `base_lr` (see
// kStretchedEpochs).
void NoteAStretchedSchedule(int epochs, double base_lr) {
  if (epochs <= kStretchedEpochs || base_lr <= kStretchedBaseLr) return;
  std::printf("chaos: note: the learning rate's schedule stretches over %d epochs and stays near its peak for most "
              "of them; at train.base_lr %s the examples' models collapsed to 10%% in such runs, fault-free too "
              "(docs/lab.md); --set train.base_lr=%s trains stably\n",
              epochs, Fixed(base_lr, 2).c_str(), Fixed(kStretchedBaseLr, 1).c_str());
}

std::string NodeList(const std::vector<int>& nodes) {
  std::string out;
  for (int n : nodes) out += (out.empty() ? "node" : " and node") + std::to_string(n);
  return out;
}

struct RunningFault {
  FaultOutcome outcome;
  Clock::time_point at{};
  std::map<size_t, int64_t> steps_at_fault;  // instance -> its step then
  size_t restarted_instance = SIZE_MAX;
  bool done = false;
  bool hung = false;  // a hang began before the cluster trained again after it
};

// Seconds from the fault until the cluster trained again after it, or -1: an
// instance that was training at the fault got two metrics records (2 x
// kLogEverySteps steps) past its step then; or, when those instances all
// ended meanwhile (killed, or ended by themselves and started again), any
// instance wrote two records after the fault.
double TrainedAgainAfter(const Watch& watch, const RunningFault& rf) {
  for (const auto& [i, step] : rf.steps_at_fault) {
    const Instance& inst = watch.instances()[i];
    if (inst.step >= step + 2 * kLogEverySteps) return Seconds(inst.last_record - rf.at);
  }
  for (const Instance& inst : watch.instances()) {
    int after = 0;
    for (const auto& [seen, samples] : inst.history) {
      if (seen > rf.at && ++after == 2) return Seconds(seen - rf.at);
    }
  }
  return -1.0;
}

std::vector<std::string> CommonSets(const ChaosOptions& options, const std::string& run_name) {
  std::vector<std::string> sets = options.overrides;
  sets.push_back("run.output_dir=" + TomlQuote(options.output_dir));
  sets.push_back("run.name=" + TomlQuote(run_name));
  sets.push_back("run.progress=\"off\"");
  sets.push_back("train.log_every_steps=" + std::to_string(kLogEverySteps));
  // Only the final evaluation: the rate compares training with training.
  sets.push_back("train.eval_every_epochs=0");
  return sets;
}

// `link`: the namespaces the nodes run in (partitions), or null (loopback).
LaunchOptions BaseLaunch(const ChaosOptions& options, const std::vector<std::string>& sets,
                         const EmulatedLink* link) {
  LaunchOptions launch;
  launch.num_nodes = options.plan.num_nodes;
  launch.config_path = options.config_path;
  launch.overrides = sets;
  launch.executable = options.executable;
  if (!options.verbose) launch.output_file = options.output_dir + "/launch.log";
  if (link != nullptr) {
    // Each node as a host of its own: a partition then cuts all it shares
    // with the others (no shared-memory segment across the cut).
    launch.node_hosts = link->hosts();
    for (int i = 0; i < launch.num_nodes; ++i) {
      launch.node_wrappers.push_back(link->Wrapper(i));
      launch.node_overrides.emplace_back(i, "cluster.host_group=" + TomlQuote("chaos-host" + std::to_string(i)));
    }
  }
  return launch;
}

// Every thread's stack of every running node, one file per node under `dir`
// (gdb attaches for a moment); returns what to print.
std::string WriteStacks(LaunchControl& control, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create " + dir + ": " + ec.message();
  int written = 0;
  std::string failure;
  for (int i = 0; i < control.num_nodes(); ++i) {
    if (!control.Running(i)) continue;
    Result<std::string> out = RunCommand({"gdb", "-p", std::to_string(control.Pid(i)), "-batch", "-nx", "-ex",
                                          "set pagination off", "-ex", "thread apply all bt"});
    if (!out) {
      failure = out.error().message();
      continue;
    }
    std::ofstream(dir + "/node" + std::to_string(i) + ".txt") << *out;
    ++written;
  }
  if (written == 0) return "no stacks written" + (failure.empty() ? std::string() : ": " + failure);
  return "stacks of " + std::to_string(written) + " node(s) in " + dir;
}

// A fault-free run, in <output>/<run_name>: trains for baseline_s after
// formation, then stops. Returns {samples/s, epochs/s}.
Result<std::pair<double, double>> RunBaseline(const ChaosOptions& options, const EmulatedLink* link,
                                              const std::string& run_name) {
  std::vector<std::string> sets = CommonSets(options, run_name);
  sets.push_back("train.epochs=1000");
  Watch watch(options.plan.num_nodes, options.output_dir + "/" + run_name);
  LaunchOptions launch = BaseLaunch(options, sets, link);
  bool stopped = false;
  Clock::time_point warm{};
  double first_position = -1.0;
  launch.on_line = [&](int node, std::string_view line) { watch.OnLine(node, line); };
  launch.on_tick = [&](LaunchControl& control) {
    const Clock::time_point now = Clock::now();
    watch.Poll(now);
    if (!watch.formed() || stopped) return;
    if (warm == Clock::time_point{} && now - watch.formed_at() >
        std::chrono::duration<double>(options.baseline_s * kBaselineWarmupShare)) {
      warm = now;
      first_position = watch.instances()[0].position;
    }
    if (now - watch.formed_at() > std::chrono::duration<double>(options.baseline_s)) {
      stopped = true;
      control.SignalAll(SIGTERM);
    }
  };
  watch.AddFirstStarts(options.plan.num_nodes, Clock::now());
  LaunchResult result;
  (void)Launch(launch, &result);  // stopped by us: every node exits 143
  if (!watch.formed() || warm == Clock::time_point{}) {
    return Err(Unavailable("chaos: the fault-free run did not train for " + Fixed(options.baseline_s, 0) +
                           " s (see " + options.output_dir + "/launch.log)"));
  }
  watch.Poll(Clock::now());
  const Instance& node0 = watch.instances()[0];
  const double seconds = Seconds(node0.last_record - warm);
  const double epochs_per_s = seconds > 0 ? (node0.position - first_position) / seconds : 0.0;
  return std::make_pair(watch.SamplesPerSecond(warm), epochs_per_s);
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())) - 1))];
}

// A fault that outlasts the training cannot be survived: a node cut off or
// frozen as the others finish has no cluster to come back to. At the pace
// since formation (`t` seconds ago), the training must have the fault's
// length and kRecoveryAllowanceS left. Why not, or "".
std::string OutlastsTheTraining(const Watch& watch, const PlannedFault& f, int epochs, double t) {
  double done = 0.0;
  for (const Instance& inst : watch.instances()) done = std::max(done, inst.position);
  const double left_s = done > 0 ? t * (epochs - done) / done : 1e9;
  if (left_s >= f.duration_s + kRecoveryAllowanceS) return "";
  return "the training ends in about " + Fixed(left_s, 0) + " s, before it could be survived";
}

}  // namespace

Result<std::vector<FaultKind>> ParseFaultKinds(const std::string& text) {
  std::vector<FaultKind> kinds;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    const auto kind = FromName(kFaultKindNames, name);
    if (!kind) {
      return Err(InvalidArgument("chaos: --faults '" + text + "': unknown fault '" + name +
                                 "' (expected kill, stop, restart or partition)"));
    }
    if (std::find(kinds.begin(), kinds.end(), *kind) == kinds.end()) kinds.push_back(*kind);
  }
  if (kinds.empty()) return Err(InvalidArgument("chaos: --faults names no fault"));
  return kinds;
}

std::vector<PlannedFault> PlanFaults(const ChaosPlanOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(1.0 / std::max(o.mtbf_s, 1e-3));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t n = static_cast<size_t>(o.num_nodes);
  std::vector<bool> dead(n, false);
  std::vector<double> frozen_until(n, 0.0);
  std::vector<PlannedFault> plan;
  auto pick = [&](std::vector<int>& from) {
    const size_t k = static_cast<size_t>(unit(rng) * static_cast<double>(from.size())) % from.size();
    const int node = from[k];
    from.erase(from.begin() + static_cast<std::ptrdiff_t>(k));
    return node;
  };
  for (double t = o.first_fault_s + gap(rng); t < o.horizon_s; t += gap(rng)) {
    std::vector<int> training, gone;
    for (size_t i = 0; i < n; ++i) {
      if (dead[i]) {
        gone.push_back(static_cast<int>(i));
      } else if (frozen_until[i] <= t) {
        training.push_back(static_cast<int>(i));
      }
    }
    const int spare = static_cast<int>(training.size()) - o.min_running;
    std::vector<FaultKind> possible;
    for (FaultKind kind : o.kinds) {
      if ((kind == FaultKind::kRestart && !gone.empty()) || (kind != FaultKind::kRestart && spare >= 1)) {
        possible.push_back(kind);
      }
    }
    // The draws below happen whatever is possible, so that one arrival's
    // choice never shifts the next arrivals' times.
    const double kind_draw = unit(rng), two_draw = unit(rng), length_draw = unit(rng);
    if (possible.empty()) continue;
    PlannedFault f;
    f.at_s = t;
    f.kind = possible[static_cast<size_t>(kind_draw * static_cast<double>(possible.size())) % possible.size()];
    switch (f.kind) {
      case FaultKind::kKill: {
        const int victims = spare >= 2 && two_draw < 0.25 ? 2 : 1;
        for (int v = 0; v < victims; ++v) {
          f.nodes.push_back(pick(training));
          dead[static_cast<size_t>(f.nodes.back())] = true;
        }
        break;
      }
      case FaultKind::kStop:
      case FaultKind::kPartition: {
        const double longest = f.kind == FaultKind::kStop ? o.max_freeze_s : o.max_partition_s;
        f.nodes.push_back(pick(training));
        f.duration_s = 0.5 + length_draw * std::max(0.0, longest - 0.5);
        frozen_until[static_cast<size_t>(f.nodes.back())] = t + f.duration_s;
        break;
      }
      case FaultKind::kRestart:
        f.nodes.push_back(pick(gone));
        dead[static_cast<size_t>(f.nodes.back())] = false;
        break;
    }
    std::sort(f.nodes.begin(), f.nodes.end());
    plan.push_back(std::move(f));
  }
  return plan;
}

Result<ChaosSummary> RunChaos(const ChaosOptions& options) {
  if (options.plan.num_nodes < options.plan.min_running + 1) {
    return Err(InvalidArgument("chaos: --nodes " + std::to_string(options.plan.num_nodes) +
                               " leaves no node to fault above --min-running " +
                               std::to_string(options.plan.min_running)));
  }
  if (!(options.minutes > 0) || !(options.plan.mtbf_s > 0) || !(options.hang_bound_s > 0)) {
    return Err(InvalidArgument("chaos: --minutes, --mtbf and --hang-bound must be > 0"));
  }
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec) return Err(Unavailable("chaos: cannot create " + options.output_dir + ": " + ec.message()));
  std::ofstream events(options.output_dir + "/chaos.jsonl", std::ios::trunc);
  if (!events) return Err(Unavailable("chaos: cannot write " + options.output_dir + "/chaos.jsonl"));

  // Partitions need every node in a namespace of its own.
  std::unique_ptr<EmulatedLink> link;
  const auto& kinds = options.plan.kinds;
  if (std::find(kinds.begin(), kinds.end(), FaultKind::kPartition) != kinds.end()) {
    Status available = EmulatedLink::Available();
    if (!available.ok()) {
      return Err(Unavailable("chaos: --faults partition runs the nodes in network namespaces: " +
                             available.message()));
    }
    CHORUS_ASSIGN_OR_RETURN(link, EmulatedLink::Create(options.plan.num_nodes, LinkShape{}));
    std::printf("chaos: %s\n", link->Describe().c_str());
  }

  ChaosSummary summary;
  double epochs_per_s = 0.0;
  if (options.baseline_s > 0) {
    std::printf("chaos: fault-free run of %d nodes for %s s\n", options.plan.num_nodes,
                Fixed(options.baseline_s, 0).c_str());
    std::fflush(stdout);
    CHORUS_ASSIGN_OR_RETURN(auto rates, RunBaseline(options, link.get(), "baseline"));
    summary.baseline_before_samples_per_s = rates.first;
    epochs_per_s = rates.second;
    std::printf("chaos: fault-free: %s samples/s, %s epochs/s\n", Fixed(rates.first, 0).c_str(),
                Fixed(rates.second, 4).c_str());
  }
  ChaosPlanOptions plan_options = options.plan;
  plan_options.horizon_s = options.minutes * 60.0;
  const std::vector<PlannedFault> plan = PlanFaults(plan_options);
  // Training that takes about `train_minutes` without faults (at least one epoch).
  const double train_minutes = options.train_minutes > 0 ? options.train_minutes : options.minutes;
  const int epochs =
      epochs_per_s > 0 ? std::max(1, static_cast<int>(std::lround(epochs_per_s * train_minutes * 60.0))) : 0;
  std::printf("chaos: %zu faults planned over %s min (seed %llu, mtbf %s s)%s\n", plan.size(),
              Fixed(options.minutes, 1).c_str(), static_cast<unsigned long long>(options.plan.seed),
              Fixed(options.plan.mtbf_s, 1).c_str(),
              epochs > 0 ? (", training " + std::to_string(epochs) + " epochs").c_str() : "");
  NoteAStretchedSchedule(epochs, options.base_lr);
  std::fflush(stdout);

  std::vector<std::string> sets = CommonSets(options, "chaos");
  if (epochs > 0) sets.push_back("train.epochs=" + std::to_string(epochs));
  Watch watch(options.plan.num_nodes, options.output_dir + "/chaos");
  LaunchOptions launch = BaseLaunch(options, sets, link.get());
  std::vector<RunningFault> running;
  size_t next = 0;
  int restarts = 0;
  std::vector<std::pair<int, Clock::time_point>> to_continue;  // frozen nodes and when to resume them
  std::vector<std::pair<int, Clock::time_point>> to_heal;      // cut-off nodes and when to join them again
  // Per node: whether its end was ours (a kill), so that a node that ended by
  // itself is told apart, and whether it did (counted once, never revived).
  std::vector<bool> ended_by_us(static_cast<size_t>(options.plan.num_nodes), false);
  std::vector<bool> ended_itself(static_cast<size_t>(options.plan.num_nodes), false);
  int self_ended = 0;
  int crashes = 0;  // of self_ended: ended by a signal (a crash)
  int end_restarts = 0;  // dead nodes started again when the faults ended
  bool revived = false;
  bool in_stall = false, stopping = false, ended_training = false, interrupted = false;
  Clock::time_point stall_from{}, next_sample{}, last_sample{}, stop_sent{};
  int seconds_total = 0, seconds_training = 0;
  double faults_end_s = options.minutes * 60.0;
  const double deadline_s = std::max(faults_end_s, train_minutes * 60.0) * 3.0 + 120.0;

  auto log_event = [&](const nlohmann::json& e) { events << e.dump() << "\n" << std::flush; };
  auto since_formed = [&](Clock::time_point t) { return Seconds(t - watch.formed_at()); };

  launch.on_line = [&](int node, std::string_view line) {
    watch.OnLine(node, line);
    if (line.find("== node") != std::string_view::npos) ended_training = true;
  };
  // Starts `node` again under its name, bootstrapping from the running nodes;
  // returns the instance its metrics go to.
  auto restart = [&](LaunchControl& control, int node, Clock::time_point now) -> Result<size_t> {
    std::vector<std::string> bootstrap;
    for (int i = 0; i < options.plan.num_nodes; ++i) {
      if (control.Running(i) && !watch.address(i).empty()) bootstrap.push_back(watch.address(i));
    }
    const std::string name = "restart" + std::to_string(++restarts);
    CHORUS_RETURN_IF_ERROR(control.Restart(node, bootstrap, {"run.name=" + TomlQuote(name), "cluster.min_nodes=1"}));
    ended_by_us[static_cast<size_t>(node)] = false;
    return watch.AddInstance(node, options.output_dir + "/" + name + "/node" + std::to_string(node), now);
  };

  launch.on_tick = [&](LaunchControl& control) {
    const Clock::time_point now = Clock::now();
    watch.Poll(now);
    if (!watch.formed()) return;
    if (watch.last_progress() < watch.formed_at()) watch.set_last_progress(watch.formed_at());
    const double t = since_formed(now);
    if (control.Interrupted() && !interrupted) {
      // Ctrl-C or SIGTERM: the launch forwarded it; no fault, restart or
      // cut follows, and frozen or cut-off nodes are let go so they can stop.
      interrupted = true;
      ended_training = true;
      std::printf("chaos: %7.1f s  stopped by a signal: no more faults or restarts\n", t);
      std::fflush(stdout);
      control.SignalAll(SIGCONT);
      for (const auto& [node, when] : to_heal) {
        if (link != nullptr) (void)link->Heal(node);
      }
      to_heal.clear();
      to_continue.clear();
    }

    // A node that ended by itself during training is a failure: one the
    // cluster removed (frozen, cut off, its part of a split yielded) rejoins
    // by itself as the same process (cluster.rejoin), so nothing restarts it.
    for (int i = 0; i < options.plan.num_nodes && !ended_training; ++i) {
      const size_t c = watch.current(i);
      if (control.Running(i) || ended_by_us[static_cast<size_t>(i)] || ended_itself[static_cast<size_t>(i)] ||
          c == SIZE_MAX) {
        continue;
      }
      ended_itself[static_cast<size_t>(i)] = true;  // reported once, never revived
      const int ws = control.WaitStatus(i);
      if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) continue;
      ++self_ended;
      if (WIFSIGNALED(ws)) ++crashes;  // chaos sends no signal to a node it does not count as a fault
      std::printf("chaos: %7.1f s  node%d ended by itself (%s): a failure, not started again\n", t, i,
                  WIFEXITED(ws) ? ("status " + std::to_string(WEXITSTATUS(ws))).c_str()
                                : ("signal " + std::to_string(WTERMSIG(ws))).c_str());
      log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kSelfEnded))}, {"t", t}, {"nodes", {i}}});
    }

    // The faults are over: a supervisor brings every dead node back, so that
    // the rest of the run trains at full strength (the throughput retained
    // then measures what the faults cost, not how many nodes they left dead).
    if (t >= faults_end_s && !revived && !ended_training) {
      revived = true;
      std::vector<int> back;
      for (int i = 0; i < options.plan.num_nodes; ++i) {
        const int ws = control.WaitStatus(i);
        if (control.Running(i) || watch.current(i) == SIZE_MAX || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) ||
            ended_itself[static_cast<size_t>(i)]) {
          continue;
        }
        if (restart(control, i, now)) back.push_back(i);
      }
      end_restarts = static_cast<int>(back.size());
      if (!back.empty()) {
        std::printf("chaos: %7.1f s  the faults are over: %s started again\n", t, NodeList(back).c_str());
        log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kRevive))}, {"t", t}, {"nodes", back}});
      }
    }

    for (auto it = to_continue.begin(); it != to_continue.end();) {
      if (it->second <= now || t >= faults_end_s) {
        control.Signal(it->first, SIGCONT);
        it = to_continue.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = to_heal.begin(); it != to_heal.end();) {
      if (it->second <= now || t >= faults_end_s) {
        Status healed = link->Heal(it->first);
        if (!healed.ok()) std::printf("chaos: %7.1f s  healing node%d: %s\n", t, it->first, healed.message().c_str());
        it = to_heal.erase(it);
      } else {
        ++it;
      }
    }

    // Faults due now.
    while (next < plan.size() && plan[next].at_s <= t && !ended_training) {
      const PlannedFault& f = plan[next++];
      RunningFault rf;
      rf.outcome.fault = f;
      rf.at = now;
      for (int node : f.nodes) {
        const bool running = control.Running(node);
        if (f.kind == FaultKind::kRestart ? running : !running) {
          rf.outcome.skipped = "node" + std::to_string(node) + (running ? " is running" : " is not running");
        }
      }
      if (rf.outcome.skipped.empty() && epochs > 0) rf.outcome.skipped = OutlastsTheTraining(watch, f, epochs, t);
      if (rf.outcome.skipped.empty()) {
        for (size_t i = 0; i < watch.instances().size(); ++i) {
          const int node = watch.instances()[i].node;
          if (watch.current(node) != i || !control.Running(node)) continue;
          if (std::find(f.nodes.begin(), f.nodes.end(), node) != f.nodes.end()) continue;
          rf.steps_at_fault[i] = watch.instances()[i].step;
        }
        switch (f.kind) {
          case FaultKind::kKill:
            for (int node : f.nodes) {
              ended_by_us[static_cast<size_t>(node)] = true;
              control.Signal(node, SIGKILL);
            }
            break;
          case FaultKind::kStop:
            control.Signal(f.nodes[0], SIGSTOP);
            to_continue.emplace_back(f.nodes[0],
                                     now + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(f.duration_s)));
            break;
          case FaultKind::kPartition: {
            Status cut = link->Cut(f.nodes[0]);
            if (!cut.ok()) {
              rf.outcome.skipped = cut.message();
              break;
            }
            to_heal.emplace_back(f.nodes[0], now + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(f.duration_s)));
            break;
          }
          case FaultKind::kRestart: {
            Result<size_t> instance = restart(control, f.nodes[0], now);
            if (!instance) {
              rf.outcome.skipped = instance.error().message();
            } else {
              rf.restarted_instance = *instance;
            }
            break;
          }
        }
      }
      rf.outcome.injected = rf.outcome.skipped.empty();
      rf.hung = in_stall;  // injected into a hang: survived only if training comes back
      const std::string what = std::string(NameOf(kFaultKindNames, f.kind)) + " " + NodeList(f.nodes) +
                               (f.duration_s > 0 ? " for " + Fixed(f.duration_s, 1) + " s" : "");
      std::printf("chaos: %7.1f s  fault %zu: %s%s\n", t, next, what.c_str(),
                  rf.outcome.injected ? "" : (" skipped: " + rf.outcome.skipped).c_str());
      std::fflush(stdout);
      log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kFault))}, {"t", t}, {"fault", std::string(NameOf(kFaultKindNames, f.kind))},
                 {"nodes", f.nodes}, {"duration_s", f.duration_s}, {"injected", rf.outcome.injected}});
      running.push_back(std::move(rf));
    }

    for (RunningFault& rf : running) {
      if (rf.done || !rf.outcome.injected) continue;
      if (rf.restarted_instance != SIZE_MAX && rf.outcome.first_step_s < 0) {
        const Instance& inst = watch.instances()[rf.restarted_instance];
        if (inst.seen) rf.outcome.first_step_s = Seconds(inst.first_record - rf.at);
      }
      if (rf.outcome.recovery_s < 0) rf.outcome.recovery_s = TrainedAgainAfter(watch, rf);
      if (rf.outcome.recovery_s >= 0 && (rf.restarted_instance == SIZE_MAX || rf.outcome.first_step_s >= 0)) {
        rf.done = true;
        std::string text = "chaos: %7.1f s  fault " + std::to_string(&rf - running.data() + 1) +
                           ": trained again after " + Fixed(rf.outcome.recovery_s, 2) + " s";
        if (rf.restarted_instance != SIZE_MAX) {
          text += "; node" + std::to_string(rf.outcome.fault.nodes[0]) + "'s first step " +
                  Fixed(rf.outcome.first_step_s, 2) + " s after its restart";
        }
        std::printf((text + "\n").c_str(), t);
        std::fflush(stdout);
      }
    }

    // Stalls: no record from anyone for longer than the bound.
    const double stalled = Seconds(now - watch.last_progress());
    if (!ended_training && stalled > options.hang_bound_s && !in_stall) {
      in_stall = true;
      stall_from = watch.last_progress();
      ++summary.hangs;
      for (RunningFault& rf : running) rf.hung |= rf.outcome.injected && rf.outcome.recovery_s < 0;
      std::printf("chaos: %7.1f s  HANG: no trained step anywhere for %s s\n", t, Fixed(stalled, 1).c_str());
      std::fflush(stdout);
      const std::string stacks =
          WriteStacks(control, options.output_dir + "/hang" + std::to_string(summary.hangs));
      std::printf("chaos: %7.1f s  %s\n", t, stacks.c_str());
      std::fflush(stdout);
      log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kHang))}, {"t", t}, {"since_s", since_formed(stall_from)}});
    }
    if (in_stall && watch.last_progress() > stall_from) {
      in_stall = false;
      summary.longest_stall_s = std::max(summary.longest_stall_s, Seconds(watch.last_progress() - stall_from));
    }
    if (!in_stall) summary.longest_stall_s = std::max(summary.longest_stall_s, ended_training ? 0.0 : stalled);

    if (now >= next_sample) {
      // The share of the run's seconds in which some process trained.
      if (last_sample != Clock::time_point{} && !ended_training) {
        ++seconds_total;
        seconds_training += watch.SamplesPerSecond(last_sample, now) > 0 ? 1 : 0;
      }
      last_sample = now;
      next_sample = now + std::chrono::seconds(1);
      int alive = 0;
      int64_t world = 0;
      for (int i = 0; i < options.plan.num_nodes; ++i) {
        alive += control.Running(i) ? 1 : 0;
        const size_t c = watch.current(i);
        if (c != SIZE_MAX && control.Running(i)) world = std::max(world, watch.instances()[c].world_size);
      }
      log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kSample))}, {"t", t}, {"running", alive}, {"world_size", world},
                 {"samples_per_s", watch.SamplesPerSecond(now - std::chrono::seconds(5), now)}});
    }

    // A run that will not end: stopped, then killed.
    if (t > deadline_s && !stopping) {
      stopping = true;
      stop_sent = now;
      if (!in_stall) ++summary.hangs;
      std::printf("chaos: %7.1f s  the run did not end within %s s: stopping every node\n", t,
                  Fixed(deadline_s, 0).c_str());
      control.SignalAll(SIGCONT);
      control.SignalAll(SIGTERM);
    } else if (stopping && now - stop_sent > std::chrono::seconds(30)) {
      control.SignalAll(SIGKILL);
    }
  };

  watch.AddFirstStarts(options.plan.num_nodes, Clock::now());
  LaunchResult result;
  const Clock::time_point launched = Clock::now();
  (void)Launch(launch, &result);  // killed nodes make it fail; judged below
  if (!watch.formed()) {
    return Err(Unavailable("chaos: the cluster never formed (see " + options.output_dir + "/launch.log)"));
  }
  watch.Poll(Clock::now());
  (void)launched;
  // The second fault-free run, unless a signal ended this one: then the user
  // wants the summary now.
  if (options.baseline_s > 0 && !interrupted) {
    std::printf("chaos: fault-free run of %d nodes for %s s, after the faults\n", options.plan.num_nodes,
                Fixed(options.baseline_s, 0).c_str());
    std::fflush(stdout);
    Result<std::pair<double, double>> after = RunBaseline(options, link.get(), "baseline-after");
    if (after) {
      summary.baseline_after_samples_per_s = after->first;
      summary.baseline_samples_per_s =
          (summary.baseline_before_samples_per_s + summary.baseline_after_samples_per_s) / 2.0;
      std::printf("chaos: fault-free after: %s samples/s\n", Fixed(after->first, 0).c_str());
    } else {
      summary.baseline_samples_per_s = summary.baseline_before_samples_per_s;
      std::printf("chaos: fault-free after: none (%s); against the run before alone\n",
                  after.error().message().c_str());
    }
    std::fflush(stdout);
  }

  // The run: every fault, every finished replica.
  std::vector<double> recoveries, first_steps;
  std::map<FaultKind, int> per_kind;
  for (RunningFault& rf : running) {
    FaultOutcome& o = rf.outcome;
    if (!o.injected) {
      summary.faults.push_back(o);
      continue;
    }
    ++summary.injected;
    // Survived: the cluster trained again after it; unjudged: training ended first, no hang.
    if (o.recovery_s >= 0) ++summary.survived;
    summary.unjudged += o.recovery_s < 0 && !rf.hung && !stopping ? 1 : 0;
    if (o.recovery_s >= 0 && o.fault.kind == FaultKind::kKill) recoveries.push_back(o.recovery_s);
    if (o.first_step_s >= 0) first_steps.push_back(o.first_step_s);
    ++per_kind[o.fault.kind];
    summary.faults.push_back(o);
  }
  std::map<std::string, int> counts;
  std::vector<std::pair<int, std::string>> finished;
  for (int i = 0; i < options.plan.num_nodes; ++i) {
    if (i >= static_cast<int>(result.exit_codes.size()) || result.exit_codes[static_cast<size_t>(i)] != 0) continue;
    const size_t c = watch.current(i);
    const std::string dir = fs::path(watch.instances()[c].path).parent_path().string();
    std::ifstream in(dir + "/summary.json");
    const nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
    if (!s.is_object() || !s.contains("parameter_checksum")) continue;
    const std::string sum = s["parameter_checksum"].is_string() ? s["parameter_checksum"].get<std::string>()
                                                                : s["parameter_checksum"].dump();
    finished.emplace_back(i, sum);
    ++counts[sum];
    if (s.contains("test_accuracy") && s["test_accuracy"].is_number()) {
      const double accuracy = s["test_accuracy"].get<double>();
      summary.min_accuracy = summary.min_accuracy < 0 ? accuracy : std::min(summary.min_accuracy, accuracy);
      summary.max_accuracy = std::max(summary.max_accuracy, accuracy);
    }
  }
  summary.finished_nodes = static_cast<int>(finished.size());
  summary.ended_by_themselves = self_ended;
  int most = 0;
  for (const auto& [sum, count] : counts) most = std::max(most, count);
  summary.divergent = summary.finished_nodes - most;
  for (const auto& [node, sum] : finished) summary.checksums.push_back("node" + std::to_string(node) + "=" + sum);

  // Throughput: every instance's samples over the run, formation to the last record.
  summary.samples_per_s = watch.SamplesPerSecond(watch.formed_at());
  for (const Instance& inst : watch.instances()) {
    if (inst.seen) summary.chaos_seconds = std::max(summary.chaos_seconds, Seconds(inst.last_record - watch.formed_at()));
  }
  if (summary.baseline_samples_per_s > 0) summary.retained = summary.samples_per_s / summary.baseline_samples_per_s;

  const std::string checksums = JoinNames(summary.checksums, " ");
  std::string by_kind;
  for (FaultKind kind : options.plan.kinds) {
    by_kind += std::to_string(per_kind[kind]) + " " + std::string(NameOf(kFaultKindNames, kind)) + ", ";
  }
  summary.line = "chaos summary: " + std::to_string(summary.injected) + " faults injected (" +
                 by_kind.substr(0, by_kind.size() - 2) + "; " +
                 std::to_string(self_ended) + " nodes ended by themselves (failures), " +
                 std::to_string(crashes) + " of them by a signal; " +
                 std::to_string(end_restarts) + " dead at the end of the faults, started again), " +
                 std::to_string(summary.survived) + " survived (training resumed after them), " +
                 (summary.unjudged > 0 ? std::to_string(summary.unjudged) + " too late to tell, " : "") +
                 std::to_string(summary.hangs) + " hangs (bound " + Fixed(options.hang_bound_s, 0) + " s, longest stall " +
                 Fixed(summary.longest_stall_s, 1) + " s), " + std::to_string(summary.divergent) +
                 " divergent replicas of " + std::to_string(summary.finished_nodes) + " finished" +
                 (summary.min_accuracy >= 0
                      ? " (test accuracy " + Fixed(summary.min_accuracy, 4) +
                            (summary.max_accuracy > summary.min_accuracy ? " to " + Fixed(summary.max_accuracy, 4) : "") +
                            ")"
                      : std::string()) +
                 ", throughput " +
                 (summary.retained >= 0 ? Fixed(100.0 * summary.retained, 1) + "% retained (" +
                                              Fixed(summary.samples_per_s, 0) + " samples/s against " +
                                              Fixed(summary.baseline_samples_per_s, 0) + " fault-free" +
                                              (summary.baseline_after_samples_per_s > 0
                                                   ? ", the mean of " + Fixed(summary.baseline_before_samples_per_s, 0) +
                                                         " before and " +
                                                         Fixed(summary.baseline_after_samples_per_s, 0) + " after"
                                                   : std::string()) +
                                              ")"
                                        : Fixed(summary.samples_per_s, 0) + " samples/s (no fault-free run)") +
                 ", trained in " + std::to_string(seconds_training) + " of " + std::to_string(seconds_total) +
                 " seconds" +
                 "; kill to next trained step median " + Fixed(Median(recoveries), 2) + " s, p95 " +
                 Fixed(Percentile(recoveries, 0.95), 2) + " s; restart to first step median " +
                 Fixed(Median(first_steps), 2) + " s; checksums " + (checksums.empty() ? "none" : checksums);
  std::printf("%s\n", summary.line.c_str());
  std::fflush(stdout);
  log_event({{"kind", std::string(NameOf(kChaosRecordNames, ChaosRecord::kSummary))}, {"injected", summary.injected}, {"survived", summary.survived}, {"unjudged", summary.unjudged},
             {"hangs", summary.hangs}, {"ended_by_themselves", summary.ended_by_themselves}, {"divergent", summary.divergent}, {"finished", summary.finished_nodes},
             {"test_accuracy_min", summary.min_accuracy}, {"test_accuracy_max", summary.max_accuracy},
             {"samples_per_s", summary.samples_per_s}, {"baseline_samples_per_s", summary.baseline_samples_per_s},
             {"baseline_before_samples_per_s", summary.baseline_before_samples_per_s},
             {"baseline_after_samples_per_s", summary.baseline_after_samples_per_s},
             {"retained", summary.retained}, {"checksums", summary.checksums}, {"seconds", summary.chaos_seconds},
             {"seconds_training", seconds_training}, {"seconds_total", seconds_total}});
  return summary;
}

}  // namespace chorus::node
