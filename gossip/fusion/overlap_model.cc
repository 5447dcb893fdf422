// Overlap model (see overlap_model.h).
#include "gossip/fusion/overlap_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace chorus::gossip {
namespace {

std::string Micros(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f us", us);
  return buf;
}

std::string KiB(size_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

}  // namespace

FirstBucketChoice ChooseFirstBucket(std::span<const size_t> prefix_bytes, size_t default_first_bytes,
                                    std::span<const OverlapFigures> ranks, double min_gain_us,
                                    double min_gain_fraction) {
  FirstBucketChoice choice;
  if (ranks.empty()) {
    choice.reason = "no figures";
    return choice;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].spare_cores < 1.0) {
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    "one bucket layout kept: rank %zu's host had %.2f idle cores while it trained, "
                    "none for the all-reduce to overlap on",
                    r, ranks[r].spare_cores);
      choice.limiting_rank = static_cast<int>(r);
      choice.reason = buf;
      return choice;
    }
  }
  // The default first bucket's all-reduce on the slowest rank: what a split
  // must save a share of to be worth a second call.
  double default_call_us = 0;
  for (const OverlapFigures& f : ranks) {
    default_call_us = std::max(default_call_us, f.alpha_us + static_cast<double>(default_first_bytes) * f.per_byte_us);
  }
  double best_gain = -std::numeric_limits<double>::infinity();
  size_t best_k = 0;
  int best_limit = -1;
  for (size_t k = 1; k <= prefix_bytes.size(); ++k) {
    const size_t bytes = prefix_bytes[k - 1];
    if (bytes == 0 || bytes >= default_first_bytes) continue;
    double gain = std::numeric_limits<double>::infinity();
    int limit = -1;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const OverlapFigures& f = ranks[r];
      if (k > f.rest_us.size()) return {0, 0, 0, -1, "the ranks' figures differ in length"};
      const double hidden = static_cast<double>(bytes) * f.per_byte_us;
      const double window = f.rest_us[k - 1] - f.rest_default_us - f.alpha_us;
      const double g = std::min(hidden, window);
      if (g < gain) {
        gain = g;
        limit = static_cast<int>(r);
      }
    }
    if (gain > best_gain) {
      best_gain = gain;
      best_k = k;
      best_limit = limit;
    }
  }
  if (best_k == 0) {
    choice.reason = "one bucket layout kept: no group boundary below the default first bucket (" +
                    KiB(default_first_bytes) + ")";
    return choice;
  }
  const double floor_us = std::max(min_gain_us, min_gain_fraction * default_call_us);
  choice.limiting_rank = best_limit;
  choice.gain_us = best_gain;
  if (best_gain < floor_us) {
    choice.reason = "one bucket layout kept: the best first bucket (" + KiB(prefix_bytes[best_k - 1]) +
                    ") would save " + Micros(best_gain) + " a step on rank " + std::to_string(best_limit) +
                    ", under the " + Micros(floor_us) + " worth a second call";
    return choice;
  }
  choice.bytes = prefix_bytes[best_k - 1];
  choice.groups = best_k;
  choice.gain_us = best_gain;
  choice.reason = "first bucket of " + KiB(choice.bytes) + " (" + std::to_string(best_k) +
                  (best_k == 1 ? " layer" : " layers") + "), all-reduced while backward runs: saves about " +
                  Micros(best_gain) + " a step on the slowest rank (" + std::to_string(best_limit) + ")";
  return choice;
}

std::vector<float> FlattenOverlapFigures(const OverlapFigures& figures) {
  std::vector<float> flat = {static_cast<float>(figures.spare_cores), static_cast<float>(figures.alpha_us),
                             static_cast<float>(figures.per_byte_us), static_cast<float>(figures.rest_default_us)};
  for (double r : figures.rest_us) flat.push_back(static_cast<float>(r));
  return flat;
}

OverlapFigures UnflattenOverlapFigures(std::span<const float> flat) {
  OverlapFigures f;
  if (flat.size() < 4) return f;
  f.spare_cores = flat[0];
  f.alpha_us = flat[1];
  f.per_byte_us = flat[2];
  f.rest_default_us = flat[3];
  for (size_t i = 4; i < flat.size(); ++i) f.rest_us.push_back(flat[i]);
  return f;
}

}  // namespace chorus::gossip
