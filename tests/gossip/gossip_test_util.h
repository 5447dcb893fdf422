// Helpers shared by the gossip protocol and consensus tests: run N nodes as
// threads over one LocalHub, random vectors, and the exact consensus distance of
// a set of replicas (computed in double, independently of consensus.cc).
//
// Must not: hide failures (statuses are returned per node).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/status.h"
#include "gossip/transport/local/local_transport.h"
#include "common/split_mix64.h"

namespace chorus::gossip::testing {

// Runs fn(rank, transport, hub) for ranks 0..participants-1, one thread each,
// over a fresh hub of `n` slots (the hub is passed for Kill; slots past
// `participants` stay silent, for deadline tests); returns each rank's status.
inline std::vector<Status> RunOnHub(int n, int participants,
                                    const std::function<Status(int, Transport&, LocalHub&)>& fn,
                                    LocalLinkModel link = {}) {
  LocalHubOptions options;
  options.world_size = n;
  options.link = link;
  auto hub = LocalHub::Create(options);
  auto transports = hub->MakeAll();
  std::vector<Status> out(participants);
  std::vector<std::thread> threads;
  for (int r = 0; r < participants; ++r) {
    threads.emplace_back([&, r] { out[r] = fn(r, *transports[r], *hub); });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Every one of n ranks takes part.
inline std::vector<Status> RunGossipNodes(
    int n, const std::function<Status(int, Transport&, LocalHub&)>& fn) {
  return RunOnHub(n, n, fn);
}

// Closed-form all-reduce inputs: rank r holds x_r[i] = r + 1 + i % 7, whose
// sum over n ranks is n(n+1)/2 + n (i % 7); small integers, so every summation
// order gives the exact result in FP32 (and in FP16 for small n).
inline float ClosedFormInput(int rank, size_t i) {
  return static_cast<float>(rank + 1 + static_cast<int>(i % 7));
}
inline float ClosedFormSum(int n, size_t i) {
  return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
}

// The same without the hub, for the collectives' tests.
inline std::vector<Status> RunRanks(int n, int participants,
                                    const std::function<Status(int, Transport&)>& fn,
                                    LocalLinkModel link = {}) {
  return RunOnHub(
      n, participants, [&](int r, Transport& t, LocalHub&) { return fn(r, t); }, link);
}

// len values uniform in [lo, hi) from (seed, rank).
inline std::vector<float> RandomVector(uint64_t seed, int rank, size_t len, double lo = -1.0,
                                       double hi = 1.0) {
  SplitMix64 rng(seed * 1000003u + static_cast<uint64_t>(rank));
  std::vector<float> v(len);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * 0.5 * (rng.Symmetric() + 1.0));
  return v;
}

// Element-wise mean of the replicas, in double.
inline std::vector<double> MeanOf(const std::vector<std::vector<float>>& xs) {
  std::vector<double> mean(xs.at(0).size(), 0.0);
  for (const auto& x : xs) {
    for (size_t i = 0; i < x.size(); ++i) mean[i] += x[i];
  }
  for (auto& m : mean) m /= static_cast<double>(xs.size());
  return mean;
}

// max_i ||x_i - mean|| / ||mean||.
inline double ConsensusDistance(const std::vector<std::vector<float>>& xs) {
  const auto mean = MeanOf(xs);
  double norm2 = 0.0;
  for (double m : mean) norm2 += m * m;
  double worst = 0.0;
  for (const auto& x : xs) {
    double d2 = 0.0;
    for (size_t i = 0; i < x.size(); ++i) d2 += (x[i] - mean[i]) * (x[i] - mean[i]);
    worst = std::max(worst, std::sqrt(d2));
  }
  return worst / std::sqrt(norm2);
}

// sqrt(sum_i ||x_i - mean||^2): the distance to consensus of the stacked vector.
inline double DeviationNorm(const std::vector<std::vector<float>>& xs) {
  const auto mean = MeanOf(xs);
  double d2 = 0.0;
  for (const auto& x : xs) {
    for (size_t i = 0; i < x.size(); ++i) d2 += (x[i] - mean[i]) * (x[i] - mean[i]);
  }
  return std::sqrt(d2);
}

// Sum over replicas and elements, in double.
inline double TotalSum(const std::vector<std::vector<float>>& xs) {
  double s = 0.0;
  for (const auto& x : xs) {
    for (float v : x) s += v;
  }
  return s;
}

}  // namespace chorus::gossip::testing
