// gossip/protocols/: gossip on a graph (D-PSGD, pairwise, push-sum, CHOCO) and
// the consensus phase.
//
// GossipProtocol: what the node's training loop calls to mix its FP32 parameter
// vector with neighbours, and the counters every protocol keeps.
//
// Call pattern (one training thread per node):
//   auto p = DpsgdGossip::Create(transport, graph, options);  // or another protocol
//   for round = 0, 1, ...:  local optimizer step on params;  p->Mix(params, round, deadline)
//   on a membership change: p->Interrupt() from any thread (a blocked Mix returns
//   kAborted); then, once the transport has the new peers, p->SetTopology(graph,
//   epoch, params) on the training thread, and go on.
//
// Graph nodes are transport ranks: node i of the graph is rank i, and the graph
// must have transport.size() nodes. `params` is the trainer's flat master-weight
// buffer and must keep its length between SetTopology calls.
//
// Local SGD: every protocol's options have `period` = H; Mix communicates only on
// rounds with (round + 1) % H == 0 (after H local steps) and returns at once
// otherwise (counted in skipped_rounds).
//
// Failures: a transport error (dead peer: kUnavailable; silent peer:
// kDeadlineExceeded; both name the peer) ends Mix with that error, prefixed by the
// protocol and round. The protocol's state is then stale (a round may have
// completed on some nodes only) and Mix answers kFailedPrecondition until
// SetTopology. A received vector that decodes to non-finite values is not an
// error: it is rejected, counted in rejected_nonfinite, and never mixed in.
//
// Must not: see a transport implementation, own the transport, or touch params
// outside Mix / SetTopology (the pairwise protocol's responder thread works on its
// own copies, see gossip_pairwise.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/codecs/codec.h"
#include "gossip/transport/transport.h"
#include "topologies/graph.h"

namespace chorus::gossip {

// The settings every protocol has; each protocol's options extend it.
struct GossipOptions {
  // How x travels. Default: raw f32 (exact mixing).
  CodecOptions codec;
  // Local SGD: communicate only every `period`-th round (>= 1); see IsMixingRound.
  int period = 1;
  // Tag stream (gossip_tags.h): give two instances on one transport different streams.
  uint8_t tag_stream = 0;
  // Membership epoch of the initial graph (tag field; SetTopology replaces it).
  uint32_t epoch = 0;
  // Base seed of the codec's randomness (int8 stochastic rounding, random-k
  // indices) and, for pairwise gossip, of the neighbour choice.
  uint64_t seed = 1;
  // D-PSGD and pairwise: a neighbour's parameters farther from this node's
  // than this many times this node's own norm (RelativeDistance) are a
  // poisoner's, not a replica's: rejected like non-finite ones, counted in
  // rejected_outliers and logged naming the rank. Replicas that mix stay far
  // closer (docs/design.md, "Poisoned contributions"). 0: no check.
  double max_relative_distance = 0;
};

struct GossipStats {
  uint64_t bytes_sent = 0;      // payload bytes this protocol sent (headers included)
  uint64_t bytes_received = 0;  // payload bytes it received
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t rejected_nonfinite = 0;  // vectors dropped for non-finite values (CHOCO: own too)
  uint64_t rejected_outliers = 0;   // vectors dropped as too far away (GossipOptions::max_relative_distance)
  uint64_t mix_rounds = 0;          // Mix calls that communicated
  uint64_t skipped_rounds = 0;      // Mix calls skipped by the local-SGD period
  // Cheap consensus-distance estimate from the last communicating round, computed
  // from what was received anyway: ||x_i - mean of the neighbours' values|| /
  // ||x_i|| (0 when there was nothing to compare). Each protocol says which values.
  double neighbor_distance = 0.0;

  // Pairwise (AD-PSGD) only.
  uint64_t exchanges = 0;          // averagings this node took part in (either side)
  uint64_t declined_busy = 0;      // own requests declined because the peer was busy
  uint64_t served = 0;             // requests from peers this node answered with its value
  // max of |step_i - step_j| over completed exchanges and of the rounds this node
  // was ahead of its slowest live neighbour (from its notices) when Mix let it go on
  int64_t max_staleness_seen = 0;
  uint64_t staleness_sum = 0;      // sum of |step_i - step_j| over completed exchanges
  uint64_t staleness_waits = 0;    // Mix calls held back by the max_staleness bound
  double staleness_wait_seconds = 0.0;  // time those calls waited
};

// True when `round` communicates under period H (see the file comment).
inline bool IsMixingRound(int64_t round, int period) {
  return period <= 1 || (round + 1) % period == 0;
}

// InvalidArgument naming `who` unless the local-SGD period is >= 1.
Status CheckPeriod(int period, std::string_view who);

class GossipProtocol {
 public:
  virtual ~GossipProtocol() = default;
  GossipProtocol(const GossipProtocol&) = delete;
  GossipProtocol& operator=(const GossipProtocol&) = delete;

  // "d-psgd", "push-sum", "pairwise", "choco".
  virtual std::string_view Name() const = 0;

  // Mixes `params` (n floats, the node's master weights after its local step) with
  // the neighbours for `round` (0, 1, 2, ... as the training loop counts steps).
  [[nodiscard]] virtual Status Mix(std::span<float> params, int64_t round, Deadline deadline) = 0;

  // Installs the graph of a new membership epoch (graph over the transport's
  // current ranks) and restarts the protocol's state from `params`. Clears an
  // interrupt and the failed state. Every member must call it with the same
  // graph and epoch before mixing again.
  [[nodiscard]] virtual Status SetTopology(topologies::Graph graph, uint32_t epoch,
                                           std::span<float> params) = 0;

  // Ends background work (a responder thread) for good: the object is then
  // only kept for its buffers (Transport::UnreleasedBuffers), never used again.
  virtual void Stop() {}

  // Ends the protocol for a membership change: Stop, and then adds to
  // `params` (the weights last passed to Mix) what the protocol averaged
  // into its state and has not applied yet, so that no exchange completed
  // on the other side is lost on this one (pairwise gossip: the deltas its
  // responder served since the last Mix). Other protocols hold nothing
  // between rounds. Call once, then only destroy or keep the object.
  virtual void Retire(std::span<float> params) { Stop(); }

  // Thread-safe: makes the Mix in progress (if any) and every later Mix return
  // kAborted until SetTopology.
  void Interrupt() { interrupted_.store(true); }

  // The senders whose values RejectOutlier refused `runs` times in a row
  // (each returned once): poisoners the exchange expels.
  std::vector<Rank> TakeRepeatOutliers(int runs);
  GossipStats Stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

 protected:
  explicit GossipProtocol(Transport& transport) : transport_(transport) {}

  // Waits for every request, polling Done() with back-off so that Interrupt()
  // can end the wait. Returns the first error (cancelling the rest): the
  // transport's status (naming the peer), kDeadlineExceeded from the first
  // request still pending at the deadline, or kAborted on interrupt.
  // completions (when not null) gets one entry per request.
  [[nodiscard]] Status WaitAll(std::span<RequestPtr> requests, Deadline deadline,
                               std::vector<Completion>* completions = nullptr);

  // One synchronous round of point-to-point messages with `tag`: sends
  // payloads[k] to ranks to[k] and receives one message from each of from[k] into
  // (*inboxes)[k], resized to `capacity` bytes before and to the received size
  // after. Receives are posted before the sends. Counts bytes and messages.
  [[nodiscard]] Status Exchange(std::span<const int> to,
                                std::span<const std::span<const std::byte>> payloads,
                                std::span<const int> from, size_t capacity, Tag tag,
                                Deadline deadline, std::vector<std::vector<std::byte>>* inboxes);

  // Exchange() of the same `payload` with every one of `neighbors` (sent to each,
  // one message received from each); a transport error goes through Fail(round).
  [[nodiscard]] Status ExchangeWithNeighbors(std::span<const int> neighbors,
                                             std::span<const std::byte> payload, size_t capacity,
                                             Tag tag, Deadline deadline, int64_t round,
                                             std::vector<std::vector<std::byte>>* inboxes);

  // Common entry checks of Mix: interrupt, failed state, params length (fixed by
  // the first call or SetTopology).
  [[nodiscard]] Status CheckMixable(std::span<const float> params);
  // True (and counted in skipped_rounds) when `round` does not communicate under `period`.
  bool SkipRound(int64_t round, int period);
  // Counts a completed communicating round: its rejected vectors and the
  // neighbor_distance sqrt(diff2 / norm2) (0 when norm2 is 0).
  void RecordMixRound(double diff2, double norm2, uint64_t rejected);
  // Marks the state stale after a transport error and returns it with context.
  Status Fail(Status status, int64_t round);
  // Clears the interrupt and failed state and fixes the params length.
  void ResetState(size_t n);
  // True (counted, and logged at most once a second naming `from`) when
  // `distance` (RelativeDistance of their values from this node's) is more
  // than `max_relative_distance` allows.
  bool RejectOutlier(double distance, Rank from, double max_relative_distance);
  // `from`'s values were mixed in: its run of rejections (RejectOutlier,
  // NoteNonFinite) ends.
  void NoteAccepted(Rank from);
  // `from`'s values were rejected as non-finite: its run of rejections goes on.
  void NoteNonFinite(Rank from);

  template <typename F>
  void UpdateStats(F&& f) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    f(stats_);
  }

  bool interrupted() const { return interrupted_.load(); }
  size_t length() const { return length_; }

  Transport& transport_;

 private:
  std::atomic<bool> interrupted_{false};
  bool failed_ = false;
  bool length_fixed_ = false;
  size_t length_ = 0;
  mutable std::mutex stats_mu_;
  GossipStats stats_;
  std::atomic<int64_t> next_outlier_log_ns_{0};
  std::map<Rank, int> outlier_runs_;  // rejections in a row by sender; under stats_mu_
  std::set<Rank> outliers_taken_;     // returned by TakeRepeatOutliers once; under stats_mu_
};

// ||a - b|| / ||a|| in double; 0 when a is 0.
double RelativeDistance(std::span<const float> a, std::span<const float> b);

// A per-message seed for codec randomness from (base, rank, round).
uint64_t MessageSeed(uint64_t base, Rank rank, int64_t round);

}  // namespace chorus::gossip
