// What `chorus chaos` reads of a launch while it runs: each node process's
// metrics.jsonl as it grows (Instance), and the launch as a whole (Watch):
// which process is each node's newest, their control addresses, when the
// cluster formed, when anyone last trained, and the cluster's samples/s.
#pragma once

#include <chrono>
#include <cstdint>
#include <ios>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::node::chaos {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One process's metrics.jsonl, read as it grows.
struct Instance {
  int node = 0;
  std::string path;
  Clock::time_point started{};
  std::streamoff offset = 0;
  std::string partial;
  bool seen = false;          // at least one record
  int64_t step = -1;
  double samples = 0.0;
  double position = 0.0;      // epochs done (epoch_progress)
  Clock::time_point first_record{}, last_record{};
  int64_t world_size = 0;
  std::vector<std::pair<Clock::time_point, double>> history;  // (seen, samples) per record

  // Samples trained after `from`: from its last record at or before `from`,
  // or from its first one.
  double SamplesSince(Clock::time_point from) const;
  // Reads the records appended since the last call; true when there were any.
  bool Poll(Clock::time_point now);
};

// One launch (the baseline or the chaos run) and what its nodes wrote.
class Watch {
 public:
  Watch(int num_nodes, std::string run_dir);

  // The instance of node `node` that the nodes' first start writes.
  void AddFirstStarts(int num_nodes, Clock::time_point now);
  // A new process of `node` writing under `dir`; returns its index.
  size_t AddInstance(int node, const std::string& dir, Clock::time_point now);
  // A line of node `node`'s output: formation, its control address.
  void OnLine(int node, std::string_view line);
  // Reads every instance.
  void Poll(Clock::time_point now);

  bool formed() const { return formed_; }
  Clock::time_point formed_at() const { return formed_at_; }
  Clock::time_point last_progress() const { return last_progress_; }
  void set_last_progress(Clock::time_point t) { last_progress_ = t; }
  std::vector<Instance>& instances() { return instances_; }
  const std::vector<Instance>& instances() const { return instances_; }
  size_t current(int node) const { return current_[static_cast<size_t>(node)]; }
  const std::string& address(int node) const { return addresses_[static_cast<size_t>(node)]; }
  const std::string& run_dir() const { return run_dir_; }

  // Cluster samples/s from `from` to `to` (default: the newest record): every
  // instance's samples trained after `from`, summed, over the time.
  double SamplesPerSecond(Clock::time_point from, Clock::time_point to = {}) const;

 private:
  std::string run_dir_;
  std::vector<std::string> addresses_;  // per node, its last "listening on"
  std::vector<size_t> current_;         // per node, its newest instance
  std::vector<Instance> instances_;
  bool formed_ = false;
  Clock::time_point formed_at_{};
  Clock::time_point last_progress_{};
};

}  // namespace chorus::node::chaos
