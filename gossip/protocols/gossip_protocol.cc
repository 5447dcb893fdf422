// GossipProtocol's shared helpers: the interruptible wait, the entry checks and
// the small numeric helpers (gossip_protocol.h).
#include "gossip/protocols/gossip_protocol.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/log.h"
#include "common/split_mix64.h"
#include "kernels/vector_clones.h"

namespace chorus::gossip {

Status GossipProtocol::WaitAll(std::span<RequestPtr> requests, Deadline deadline,
                               std::vector<Completion>* completions) {
  if (completions) completions->assign(requests.size(), Completion{});
  std::vector<bool> finished(requests.size(), false);
  size_t remaining = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i]) {
      ++remaining;
    } else {
      finished[i] = true;
    }
  }
  auto cancel_rest = [&] {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!finished[i]) requests[i]->Cancel();
    }
  };
  if (transport_.Order() != nullptr) {
    // Virtual time: each receive's wait is an event of its own, in order
    // (event_order.h); polling would hold the other nodes back.
    for (size_t i = 0; i < requests.size(); ++i) {
      if (finished[i]) continue;
      auto done = requests[i]->Wait(deadline);
      finished[i] = true;
      if (!done) {
        cancel_rest();
        return done.error();
      }
      if (completions) (*completions)[i] = *done;
    }
    return Status::Ok();
  }
  // Sleeps are capped at 200 us: a round trip on the local transport is a few
  // microseconds, and 8 nodes on 2 cores must not burn CPU while they wait.
  Backoff backoff(std::chrono::microseconds(200));
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (finished[i] || !requests[i]->Done()) continue;
      auto done = requests[i]->Wait(deadline);
      finished[i] = true;
      --remaining;
      progressed = true;
      if (!done) {
        cancel_rest();
        return done.error();
      }
      if (completions) (*completions)[i] = *done;
    }
    if (remaining == 0) break;
    if (interrupted()) {
      cancel_rest();
      return Aborted("interrupted (membership change) while waiting for neighbours");
    }
    if (deadline.Expired()) {
      for (size_t i = 0; i < requests.size(); ++i) {
        if (finished[i]) continue;
        // The transport names the peer in its own deadline error.
        auto done = requests[i]->Wait(Deadline::Now());
        finished[i] = true;
        cancel_rest();
        if (!done) return done.error();
        return DeadlineExceeded("gossip wait ran past its deadline");
      }
    }
    if (progressed) {
      backoff.Reset();
    } else {
      backoff.Pause();
    }
  }
  return Status::Ok();
}

Status GossipProtocol::Exchange(std::span<const int> to,
                                std::span<const std::span<const std::byte>> payloads,
                                std::span<const int> from, size_t capacity, Tag tag,
                                Deadline deadline, std::vector<std::vector<std::byte>>* inboxes) {
  inboxes->resize(from.size());
  std::vector<RequestPtr> requests;
  requests.reserve(from.size() + to.size());
  for (size_t k = 0; k < from.size(); ++k) {
    (*inboxes)[k].resize(capacity);
    auto req = transport_.Irecv(from[k], tag, (*inboxes)[k]);
    if (!req) {
      for (auto& r : requests) r->Cancel();
      return req.error();
    }
    requests.push_back(std::move(*req));
  }
  uint64_t sent = 0;
  for (size_t k = 0; k < to.size(); ++k) {
    auto req = transport_.Isend(to[k], tag, payloads[k]);
    if (!req) {
      for (auto& r : requests) r->Cancel();
      return req.error();
    }
    requests.push_back(std::move(*req));
    sent += payloads[k].size();
  }
  std::vector<Completion> completions;
  CHORUS_RETURN_IF_ERROR(WaitAll(requests, deadline, &completions));
  uint64_t received = 0;
  for (size_t k = 0; k < from.size(); ++k) {
    (*inboxes)[k].resize(completions[k].bytes);
    received += completions[k].bytes;
  }
  UpdateStats([&](GossipStats& s) {
    s.bytes_sent += sent;
    s.messages_sent += to.size();
    s.bytes_received += received;
    s.messages_received += from.size();
  });
  return Status::Ok();
}

Status GossipProtocol::ExchangeWithNeighbors(std::span<const int> neighbors,
                                             std::span<const std::byte> payload, size_t capacity,
                                             Tag tag, Deadline deadline, int64_t round,
                                             std::vector<std::vector<std::byte>>* inboxes) {
  const std::vector<std::span<const std::byte>> payloads(neighbors.size(), payload);
  Status exchanged = Exchange(neighbors, payloads, neighbors, capacity, tag, deadline, inboxes);
  if (!exchanged.ok()) return Fail(exchanged, round);
  return Status::Ok();
}

Status GossipProtocol::CheckMixable(std::span<const float> params) {
  if (interrupted()) {
    return Aborted(std::string(Name()) + ": interrupted; call SetTopology with the new membership");
  }
  if (failed_) {
    return FailedPrecondition(std::string(Name()) +
                              ": state is stale after a failed round; call SetTopology first");
  }
  if (!length_fixed_) {
    length_ = params.size();
    length_fixed_ = true;
  } else if (params.size() != length_) {
    return InvalidArgument(std::string(Name()) + ": params has " + std::to_string(params.size()) +
                           " elements, expected " + std::to_string(length_));
  }
  return Status::Ok();
}

bool GossipProtocol::SkipRound(int64_t round, int period) {
  if (IsMixingRound(round, period)) return false;
  UpdateStats([](GossipStats& s) { ++s.skipped_rounds; });
  return true;
}

void GossipProtocol::RecordMixRound(double diff2, double norm2, uint64_t rejected) {
  const double distance = norm2 > 0.0 ? std::sqrt(diff2 / norm2) : 0.0;
  UpdateStats([&](GossipStats& s) {
    ++s.mix_rounds;
    s.rejected_nonfinite += rejected;
    s.neighbor_distance = distance;
  });
}

Status GossipProtocol::Fail(Status status, int64_t round) {
  failed_ = true;
  return status.WithContext(std::string(Name()) + " round " + std::to_string(round) + " (rank " +
                            std::to_string(transport_.rank()) + ")");
}

void GossipProtocol::ResetState(size_t n) {
  interrupted_.store(false);
  failed_ = false;
  length_ = n;
  length_fixed_ = true;
}

Status CheckPeriod(int period, std::string_view who) {
  if (period < 1) {
    return InvalidArgument(std::string(who) + ": period must be >= 1, got " +
                           std::to_string(period));
  }
  return Status::Ok();
}

bool GossipProtocol::RejectOutlier(double distance, Rank from, double max_relative_distance) {
  if (max_relative_distance <= 0 || distance <= max_relative_distance) return false;
  uint64_t count = 0;
  UpdateStats([&](GossipStats& s) {
    count = ++s.rejected_outliers;
    ++outlier_runs_[from];
  });
  const int64_t now = Clock::now().time_since_epoch().count();
  int64_t due = next_outlier_log_ns_.load();
  if (now >= due && next_outlier_log_ns_.compare_exchange_strong(due, now + int64_t{1'000'000'000})) {
    CHORUS_LOG_WARN(Subsys::kGossip, Name(), ": rejected rank ", from, "'s parameters: ", distance,
                    " times this node's norm away (bound ", max_relative_distance, "); ", count,
                    " rejected so far, at most one line a second");
  }
  return true;
}

void GossipProtocol::NoteAccepted(Rank from) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  outlier_runs_.erase(from);
}

void GossipProtocol::NoteNonFinite(Rank from) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++outlier_runs_[from];
}

std::vector<Rank> GossipProtocol::TakeRepeatOutliers(int runs) {
  std::vector<Rank> out;
  std::lock_guard<std::mutex> lock(stats_mu_);
  for (const auto& [rank, run] : outlier_runs_) {
    if (runs > 0 && run >= runs && outliers_taken_.insert(rank).second) out.push_back(rank);
  }
  return out;
}

namespace {

constexpr size_t kDistanceLanes = 8;

// sum (a - b)^2 and sum a^2 in double, element i into lane i % 8 and the lanes
// added in order at the end: a fixed order, and loops without one carried sum,
// which vectorise (a single running sum ran at a few elements per cycle).
CHORUS_VECTOR_CLONES void DistanceSums(const float* a, const float* b, size_t n, double* diff_out,
                                       double* norm_out) {
  double diff[kDistanceLanes] = {};
  double norm[kDistanceLanes] = {};
  size_t i = 0;
  for (; i + kDistanceLanes <= n; i += kDistanceLanes) {
    for (size_t l = 0; l < kDistanceLanes; ++l) {
      const double x = a[i + l];
      const double d = x - static_cast<double>(b[i + l]);
      diff[l] += d * d;
      norm[l] += x * x;
    }
  }
  for (size_t l = 0; i < n; ++i, ++l) {
    const double x = a[i];
    const double d = x - static_cast<double>(b[i]);
    diff[l] += d * d;
    norm[l] += x * x;
  }
  double diff_sum = 0.0, norm_sum = 0.0;
  for (size_t l = 0; l < kDistanceLanes; ++l) {
    diff_sum += diff[l];
    norm_sum += norm[l];
  }
  *diff_out = diff_sum;
  *norm_out = norm_sum;
}

}  // namespace

double RelativeDistance(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0, norm = 0.0;
  DistanceSums(a.data(), b.data(), std::min(a.size(), b.size()), &diff, &norm);
  return norm > 0.0 ? std::sqrt(diff / norm) : 0.0;
}

uint64_t MessageSeed(uint64_t base, Rank rank, int64_t round) {
  SplitMix64 mix(base ^ (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 40) ^
                             static_cast<uint64_t>(round) * 0x9e3779b97f4a7c15ULL);
  return mix.Next();
}

}  // namespace chorus::gossip
