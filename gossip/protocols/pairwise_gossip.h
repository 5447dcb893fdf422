// PairwiseGossip: asynchronous pairwise averaging (AD-PSGD, Lian et al. 2018).
//
// Whenever a node finishes a local step (Mix), it averages with ONE neighbour j
// picked uniformly at random: x_i, x_j <- (x_i + x_j) / 2, atomically for the
// pair and with no global barrier, so fast nodes take more steps.
//
// Responder. A background thread per node (started by Create) serves the
// neighbours' requests while the training loop computes. It never touches the
// trainer's params: the node's gossip state is
//   public  = the value x_i that averaging sees (params at the last Mix plus
//             the averaging deltas since), and
//   pending = the sum of averaging deltas not yet applied to params.
// Serving request (x_j) sets delta = (x_j - public) / 2, public += delta, pending
// += delta and answers with the old public. Mix first applies pending to params
// (params += pending; public = params), so a gradient step computed on a stale x
// lands on the averaged x, as in AD-PSGD. Both sides add opposite deltas
// (computed from the decoded values on both sides), so sum_i x_i is conserved.
//
// Exchange. The initiator i marks itself busy, sends REQUEST(seq, step) to j and
// waits for j's answer (its own tag, received from j, so a dead j is noticed at
// once); j posts a receive for i's value and answers CLEAR; i sends
// VALUE(seq, step, x_i); j answers ACCEPT(step_j, x_j) and both apply their
// delta. The extra round trip keeps every message that carries a value out of
// the responder's receive from any source (the wire in pairwise_gossip.cc says
// why). While busy,
// i's responder keeps i's value fixed (atomicity): requests from lower ranks are
// deferred until i's exchange ends and served then; requests from higher ranks
// are declined (DECLINE_BUSY). A wait chain therefore only runs to higher ranks
// and always ends: no deadlock, also when two nodes pick each other at once (the
// higher rank defers, the lower declines, then the higher serves the lower).
// A busy-declined initiator retries with another random neighbour up to
// max_attempts times, then skips the round (counted). The rule is not symmetric:
// higher ranks meet more busy declines than lower ones (declined_busy shows it).
// The responder and the training thread use the transport at the same time (as
// concurrent collectives do), so the transport must accept calls from several
// threads.
//
// Bounded staleness (max_staleness = s >= 0). On entering Mix(round) a node
// sends every neighbour a NOTICE(round), every round whether or not it
// averages; its responder records each neighbour's latest round. Mix(round)
// returns only once every neighbour has entered Mix(round - s) or later, or has
// called Finish: a node starts local step k only after each live neighbour has
// finished step k - 1 - s, i.e. no node runs more than s steps ahead of its
// slowest live neighbour (s = 0: lock-step). The wait comes before the round's
// averaging (the responder serves requests meanwhile) and ends at the Mix
// deadline with kDeadlineExceeded naming the neighbour behind (kUnavailable
// when it is known dead). A neighbour not yet heard from in the current graph (after Create or
// SetTopology) counts as behind every round, so the first Mix of a graph waits
// for each neighbour's first notice: the bound then holds even when nodes enter
// a graph at different rounds. s < 0: no wait. Averaging is never declined for
// staleness, so partners are at most s + 1 rounds apart (a node waiting in
// Mix(r) serves the neighbour at r - s - 1 it waits for).
// Stats: staleness_waits and staleness_wait_seconds; max_staleness_seen is the
// max of |step_i - step_j| over completed exchanges (<= s + 1 when bounded) and
// of round - (slowest live neighbour's round) when a Mix leaves its wait (<= s).
//
// End of training: every node calls Finish(deadline) after its last Mix; it
// sends its neighbours a finishing notice, and the responder keeps serving until
// all nodes are there (a barrier over the transport) and every neighbour's
// finishing notice has arrived (so no notice is left unreceived), then stops.
// The destructor stops the responder without a barrier.
//
// Non-finite requests are answered DECLINE_REJECTED and counted; non-finite
// answers are counted and not mixed in (the responder has already applied its
// delta: the sum then moves by that half difference).
// Stats().neighbor_distance: ||x_i - x_j|| / ||x_i|| of the last exchange the
// initiator completed.
//
// In a simulation (Transport::Order, event_order.h) the same protocol runs in
// virtual time: the responder is the node's server actor and takes requests
// in the order they arrive there; Mix, each retry and Finish wait for the
// node's turn before they read or change what the responder also touches;
// the staleness and finishing waits park the node, and a notice wakes it at
// the notice's moment. Waits that would end on wall-clock slices wait as
// long as a step may instead (a slice could drop a taken message).
//
// Must not: touch params outside Mix / SetTopology, or block the responder on
// anything but its receive (sends are non-blocking and reaped later).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gossip/codecs/codec.h"
#include "gossip/protocols/gossip_protocol.h"
#include "gossip/protocols/gossip_tags.h"
#include "gossip/protocols/pairwise_wire.h"
#include "common/split_mix64.h"

namespace chorus::gossip {

// The common settings (gossip_protocol.h; `period`: initiate an averaging
// only every period-th round, the responder serves requests at any time; `seed`
// also draws the neighbours), plus:
struct PairwiseOptions : GossipOptions {
  // Bound s: Mix(round) waits until every live neighbour has entered
  // Mix(round - s) (see the file comment); 0: lock-step; < 0: unbounded.
  int64_t max_staleness = -1;
  // Busy declines: tries per round (each with a fresh random neighbour), >= 1.
  int max_attempts = 3;
  // Pause before a retry after a busy decline; also the first slice of the
  // staleness wait's back-off (which a notice ends early).
  std::chrono::microseconds retry_interval{200};
  // How often the responder wakes from its receive to check for a stop (> 0).
  std::chrono::milliseconds responder_wake{20};
  // How long the responder waits for a value it cleared; it serves no other
  // request meanwhile. A requester marked dead ends the wait at once.
  std::chrono::milliseconds value_wait{2000};
  // Averages only with neighbours heard from in the current graph (a notice
  // since Create or SetTopology); a round with none is not averaged. For
  // nodes that install a new graph each at its own moment (no barrier): a
  // neighbour still on the older graph would not answer until it installs
  // this one, and the requester would wait for it.
  bool heard_partners_only = false;
};

class PairwiseGossip final : public GossipProtocol {
 public:
  // Needs an undirected graph with transport.size() nodes. `initial` (n floats)
  // is the node's starting value (what the responder answers before the first
  // Mix); params passed to Mix must have the same length.
  static Result<std::unique_ptr<PairwiseGossip>> Create(Transport& transport,
                                                        topologies::Graph graph,
                                                        const PairwiseOptions& options,
                                                        std::span<const float> initial);
  ~PairwiseGossip() override;
  void Stop() override { StopResponder(); }
  // Stops the responder and applies the pending averaging deltas to params.
  void Retire(std::span<float> params) override;

  std::string_view Name() const override { return "pairwise"; }
  // Applies pending averaging to params, tells the neighbours `round`, waits for
  // the staleness bound, then (on mixing rounds) averages with one random
  // neighbour and applies what was averaged meanwhile.
  [[nodiscard]] Status Mix(std::span<float> params, int64_t round, Deadline deadline) override;
  // Stops the responder, applies the pending averaging deltas to params
  // (as Retire), installs the graph, restarts from params (public = params,
  // nothing pending or deferred) and starts the responder again.
  [[nodiscard]] Status SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) override;

  // Tells the neighbours this node has finished (they no longer wait for it),
  // serves requests until every rank has called Finish (barrier) and every
  // neighbour's finishing notice has arrived, applies what was averaged
  // meanwhile to params, then stops the responder. Call once, after the last Mix.
  [[nodiscard]] Status Finish(std::span<float> params, Deadline deadline);

 private:
  struct Outgoing {
    Rank to = -1;
    std::vector<std::byte> bytes;
    RequestPtr request;
  };

  PairwiseGossip(Transport& transport, topologies::Graph graph, const PairwiseOptions& options,
                 std::unique_ptr<Codec> codec)
      : GossipProtocol(transport),
        graph_(std::move(graph)),
        options_(options),
        codec_(std::move(codec)),
        rng_(0) {}

  Status Install(topologies::Graph graph, uint32_t epoch, std::span<const float> initial);
  void StartResponder();
  void StopResponder();
  void ResponderLoop();
  // The responder's next request header (or notice) into `header`; waits at
  // most responder_wake (kDeadlineExceeded), in virtual time for the
  // earliest to arrive (event_order.h).
  Result<Completion> NextRequest(std::vector<std::byte>& header);
  // The responder's side of an exchange after REQUEST's header (request `seq`) from
  // `from`: declines at once when busy towards a higher rank, else posts the
  // receive for the value into `value`, answers CLEAR, waits for the value
  // (value_wait, or a stop) and handles it (HandleRequestLocked). A requester
  // that never sends it is only logged: its attempt fails on its side.
  void ReceiveValue(Rank from, uint64_t seq, std::vector<std::byte>& value);
  // A header-only message of `type` for `seq` with this node's step and
  // finished flag (under mu_).
  std::vector<std::byte> OwnHeaderLocked(PairwiseType type, uint64_t seq) const;
  // Request::Release, and on failure KeepForGood(buffer) and a fresh buffer of
  // its size: the provider may still write into the old one.
  static void ReleaseOrKeepBuffer(RequestPtr& request, std::vector<std::byte>& buffer);
  // Handles one request (under mu_): serve, defer or decline.
  void HandleRequestLocked(Rank from, std::span<const std::byte> bytes);
  void ServeLocked(Rank from, const PairwiseHeader& request, std::span<const std::byte> payload);
  void ServeDeferredLocked();
  void SendLocked(Rank to, Tag tag, std::vector<std::byte> bytes);
  // Reaps completed sends; a neighbour's send that failed kUnavailable is
  // remembered (a staleness wait on that neighbour then ends with it).
  void ReapLocked();
  void NoteSendFailureLocked(Rank to, const Status& status);

  // Staleness bound (file comment). NOTICE(step_, finished_) to every neighbour.
  void SendNoticesLocked();
  // Records a neighbour's notice and wakes a waiting Mix or Finish.
  void RecordNoticeLocked(Rank from, int64_t round, bool finished);
  // Index in neighbors_ of `peer`, or -1.
  int NeighborIndex(Rank peer) const;
  // Waits (max_staleness >= 0) until every live neighbour has entered
  // Mix(round - max_staleness); counts the wait and the lead in the stats.
  // Returns whether it waited, or the error (already through Fail).
  Result<bool> AwaitNeighbors(int64_t round, Deadline deadline);
  // Waits on neighbors_cv_ (lock held, released while waiting), in slices that
  // grow from retry_interval, until done(i) holds for every neighbour index i.
  // Ends early with the error of a neighbour known dead, a responder error,
  // kAborted on Interrupt, or at the deadline with kDeadlineExceeded saying
  // what(i) of the first neighbour not done. *waited: whether it had to wait.
  Status WaitForNeighborsLocked(std::unique_lock<std::mutex>& lock, Deadline deadline,
                                const std::function<bool(size_t)>& done,
                                const std::function<std::string(size_t)>& what, bool* waited);
  // Averages with one random neighbour (busy declines: retries).
  Status Average(int64_t round, Deadline deadline);
  // params += pending; pending = 0; public = params.
  void SyncLocked(std::span<float> params);
  // One attempt: request to `peer`, wait for the answer. Sets *answer_type.
  Status Attempt(Rank peer, int64_t round, Deadline deadline, PairwiseType* answer_type);
  // Attempt's steps. Encodes public_ into `request` (header first), fixes
  // own_sent_ and marks this node busy; returns the request's seq.
  Result<uint64_t> BeginRequest(int64_t round, std::vector<std::byte>& request);
  // REQUEST's header, then (once cleared) the whole request as VALUE, each
  // through SendAndAwaitAnswer; returns the last answer's size. The requests
  // stay in the caller's `requests`, so that one cancelled on an error is
  // released only after the attempt ends.
  Result<size_t> ExchangeRequest(Rank peer, uint64_t seq, Deadline deadline, std::span<const std::byte> request,
                                 std::span<std::byte> answer, std::vector<RequestPtr>& requests);
  // Posts the answer's receive, then sends `message` with `tag`, and waits for
  // both (appended to `requests`); returns the answer's size.
  Result<size_t> SendAndAwaitAnswer(Rank peer, Tag tag, std::span<const std::byte> message, Deadline deadline,
                                    std::span<std::byte> answer, std::vector<RequestPtr>& requests);
  // Reads the answer's header into the out-parameters; an error for a short
  // answer, another request's answer or an unknown type.
  Status ReadAnswerHeader(Rank peer, uint64_t seq, std::span<const std::byte> answer,
                          PairwiseType* answer_type, int64_t* peer_step);
  // Moves public_ halfway to the accepted answer's value (non-finite: counted, not mixed).
  Status MixAnswerLocked(Rank peer, int64_t peer_step, std::span<const std::byte> payload);
  // No longer busy: serves what was deferred; returns `status`.
  Status EndAttempt(Status status);
  void EndAttemptLocked();
  // delta = (scratch_ - own) / 2 added to public_ and pending_: one side of an
  // averaging, `own` the value this side sent as the other side decoded it.
  void MoveHalfwayLocked(std::span<const float> own);

  topologies::Graph graph_;
  PairwiseOptions options_;
  std::unique_ptr<Codec> codec_;
  std::vector<int> neighbors_;
  SplitMix64 rng_;  // training thread only

  std::mutex mu_;  // guards everything below
  std::vector<float> public_;
  std::vector<float> pending_;
  std::vector<float> scratch_;   // decoded peer values
  std::vector<float> own_sent_;  // decoded own value of the current exchange
  int64_t step_ = 0;
  bool busy_ = false;
  bool finished_ = false;
  uint64_t next_seq_ = 1;
  std::deque<std::pair<Rank, std::vector<std::byte>>> deferred_;
  std::list<Outgoing> outgoing_;
  Status responder_status_;
  // Per neighbour (index of neighbors_): the latest round of its notices
  // (kNotHeard before the first of the current graph), whether it has
  // finished, and a failed send to it (kUnavailable). neighbors_cv_ is
  // notified on every notice.
  static constexpr int64_t kNotHeard = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> neighbor_round_;
  std::vector<char> neighbor_finished_;
  std::vector<Status> neighbor_error_;
  std::condition_variable neighbors_cv_;

  std::atomic<bool> stop_{false};
  std::thread responder_;
};

}  // namespace chorus::gossip
