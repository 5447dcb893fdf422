#include "node/lab/chaos/chaos_watch.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace chorus::node::chaos {

double Instance::SamplesSince(Clock::time_point from) const {
  if (history.empty() || history.back().first <= from) return 0.0;
  auto after = std::upper_bound(history.begin(), history.end(), from,
                                [](Clock::time_point t, const auto& h) { return t < h.first; });
  const double base = after == history.begin() ? after->second : std::prev(after)->second;
  return history.back().second - base;
}

bool Instance::Poll(Clock::time_point now) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < offset) offset = 0, partial.clear();  // truncated: read again
  if (size == offset) return false;
  in.seekg(offset);
  std::string data(static_cast<size_t>(size - offset), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  offset = size;
  partial += data;
  bool any = false;
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const nlohmann::json r = nlohmann::json::parse(partial.substr(start, nl - start), nullptr, false);
    if (!r.is_object() || !r.contains("step") || !r.contains("samples")) continue;
    step = r["step"].get<int64_t>();
    samples = r["samples"].get<double>();
    // epoch_progress counts the epochs done and the fraction of the current one.
    position = r.contains("epoch_progress") ? r.value("epoch_progress", 0.0) : r.value("epoch", 0.0);
    world_size = r.value("world_size", int64_t{0});
    if (!seen) first_record = now;
    seen = true;
    history.emplace_back(now, samples);
    last_record = now;
    any = true;
  }
  partial.erase(0, start);
  return any;
}

Watch::Watch(int num_nodes, std::string run_dir)
    : run_dir_(std::move(run_dir)), addresses_(static_cast<size_t>(num_nodes)),
      current_(static_cast<size_t>(num_nodes), SIZE_MAX) {}

void Watch::AddFirstStarts(int num_nodes, Clock::time_point now) {
  for (int i = 0; i < num_nodes; ++i) AddInstance(i, run_dir_ + "/node" + std::to_string(i), now);
}

size_t Watch::AddInstance(int node, const std::string& dir, Clock::time_point now) {
  Instance inst;
  inst.node = node;
  inst.path = dir + "/metrics.jsonl";
  inst.started = now;
  instances_.push_back(std::move(inst));
  current_[static_cast<size_t>(node)] = instances_.size() - 1;
  return instances_.size() - 1;
}

void Watch::OnLine(int node, std::string_view line) {
  if (!formed_ && line.find("epoch 0: members") != std::string_view::npos) {
    formed_ = true;
    formed_at_ = Clock::now();
  }
  constexpr std::string_view kListening = " listening on ";
  const size_t at = line.find(kListening);
  if (at != std::string_view::npos && line.find("[control] node ") != std::string_view::npos) {
    const size_t begin = at + kListening.size();
    const size_t end = line.find_first_of(" ,", begin);
    addresses_[static_cast<size_t>(node)] = std::string(line.substr(begin, end - begin));
  }
}

void Watch::Poll(Clock::time_point now) {
  for (Instance& inst : instances_) {
    if (inst.Poll(now)) last_progress_ = std::max(last_progress_, inst.last_record);
  }
}

double Watch::SamplesPerSecond(Clock::time_point from, Clock::time_point to) const {
  double samples = 0.0;
  Clock::time_point end = from;
  for (const Instance& inst : instances_) {
    samples += inst.SamplesSince(from);
    if (inst.seen) end = std::max(end, inst.last_record);
  }
  if (to != Clock::time_point{}) end = to;
  const double s = Seconds(end - from);
  return s > 0 ? samples / s : 0.0;
}

}  // namespace chorus::node::chaos
