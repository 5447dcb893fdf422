// FabricCore: the libfabric endpoint behind FabricTransport (private to this folder).
//
// Setup follows fabtests' named steps (getinfo with hints, fabric, domain, CQ,
// AV, endpoint, bind, enable, getname) with one RAII owner per object
// (fabric_objects.h). Address exchange is the caller's: LocalAddress() is the
// fi_getname blob, SetPeers() inserts the peers' blobs into the AV.
//
// Operations. Every Isend / Irecv owns a FabricOp that holds its fi_context2
// (FI_CONTEXT mode) and lives in `inflight_` until its completion is reaped from
// the CQ, so a cancelled or abandoned request never frees a context the
// provider still holds. The Request handle shares the op; its result is fixed
// once (`finished`) by the completion, a CQ error, MarkPeerDead, a membership
// change or a deadline.
//
// Progress. Reading the CQ drives the tcp and shm providers. Two callers do it
// through Poll(): a waiting Request (first `busy_poll` of every Wait without
// yielding, when the host has a core per busy process, then `wait_spin`
// yielding between polls: no thread hand-off on short waits) and the progress thread,
// which polls with exponential back-off (a few yields, then sleeps of 1 us
// doubling up to `progress_max_sleep`; while a request is blocked or
// backlogged, BlockedNapCap: 100 us, or `progress_max_sleep` once the polls
// have found nothing for 20 ms) so that idle endpoints cost almost nothing and 8 processes on 2
// cores stay live. While a waiter is polling, the progress thread stands aside
// (naps of up to `progress_max_sleep`): two pollers would only take turns for
// the lock and the cores. Blocked waiters sleep on their op's condition
// variable with the deadline. `cq_mu_` serialises every provider data-path call (CQ reads,
// posts, cancels): see its comment for the shm race this avoids.
//
// Back-pressure. A post refused with -FI_EAGAIN (queue full) is not an error:
// the op joins a FIFO backlog and every Poll, after reading completions (which
// free queue space), retries the backlog in order. Isend / Irecv never block.
//
// Deadlines. A Wait that reaches its deadline calls fi_cancel, drives progress
// until the FI_ECANCELED (or racing real) completion is reaped, and returns
// kDeadlineExceeded naming the peer.
//
// Discard filters. While any is set, Poll posts each sweep (kDiscardSweep,
// backing off) one fi_trecvmsg(FI_PEEK) from any source per filter with nothing in flight. A
// hit (its tag and length) starts a drain: a receive of that tag from any
// source into a buffer of its own, freed on completion (StartDrain). A real
// receive, not FI_DISCARD: on some providers only a receive releases the
// sender (and what it sends next). Peeks, drains and FI_ENOMSG misses are
// reaped like any op but not counted as progress. Why, per provider:
// docs/libfabric.md ("libfabric 1.17 behaviours and what the transport does").
//
// First contact (net only). When both ends of a pair send first at once, net
// can lose what one of them already wrote (a simultaneous connect replaces the
// good connection; docs/libfabric.md, "`net`": "Simultaneous connect").
// So each pair's first contact goes one way: on the first SetPeers that names
// a peer, the endpoint with the smaller address blob sends it a first-contact
// message (tag kReservedTag, which no user message has; not counted in Stats);
// the other holds its sends to that peer behind a gate until that message
// arrives (or kFirstContactWait passes, or the peer dies or leaves). Receives
// are never held, and a pair costs one connection whether or not it talks.
//
// Epochs (shm only). shm can neither drop a message no receive will take nor
// release a send to a dead peer (docs/libfabric.md, "`shm`"). So FabricTransport
// gives shm a fresh FabricCore per membership epoch (Transport::BeginEpoch),
// its endpoint named with fi_setname after the published address and the
// epoch (EpochAddress in fabric_transport.cc): peers derive each other's name,
// and the old endpoint closes with everything a failed epoch left in it. Other
// providers keep one endpoint for the whole run.
//
// Dead peers' locks (shm only). shm sends by taking a spin lock inside the
// receiver's region, so a process killed while holding a lock leaves a send to
// it (or a receive of a message it queued) spinning in the provider for ever,
// holding cq_mu_ (docs/libfabric.md, "`shm`": "A dead peer's spin lock"). So
// the core watches each peer's process (a pidfd, SetPeers) and fails a send to
// one that has exited instead of giving it to the provider (a receive stays
// posted: its message may be here already). The control thread never waits
// for cq_mu_ (MarkPeerDead's and SetPeers' cancels are left to the next Poll
// when another thread holds it), and a watchdog thread times each provider
// call (ProviderCallClock). Once a peer's process has exited, the watchdog
// also releases the region locks that a killed process can have left held,
// when they stay held at every try for kLockHeldProof (shm_region_lock.h):
// this endpoint's own (a peer killed while sending to it; its progress only
// tries that lock, so nothing here would notice, while every send to it
// spins) and exited peers' (one killed while reading its queue). A live peer's
// lock is left to that peer's watchdog. A call that has still run
// FabricOptions::wedged_after while some peer's process has exited can never
// return, and FabricOptions::on_wedged is told.
//
// Must not: be included outside gossip/transport/fabric/ (it pulls <rdma/...>);
// spin without yielding beyond `busy_poll`; free an op whose context the provider may still hold.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/process_watch.h"
#include "gossip/transport/transport.h"
#include "gossip/transport/fabric/fabric_objects.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "gossip/transport/fabric/mr_cache.h"
#include "gossip/transport/fabric/provider_call_clock.h"
#include "gossip/transport/seal/data_seal.h"

namespace chorus::gossip::fabric {

inline constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
inline constexpr size_t kCqBatch = 32;
// How often Poll applies the discard filters while there are any: every
// kDiscardSweep after a filter is added or a message dropped, backing off x2
// per sweep to kDiscardSweepMax.
inline constexpr std::chrono::milliseconds kDiscardSweep{5};
inline constexpr std::chrono::milliseconds kDiscardSweepMax{1000};
// The largest message tcp;ofi_rxm 1.17 sends eagerly; larger ones go by
// rendezvous: the receiver reads them from the sender when it posts the
// receive (docs/libfabric.md, "`tcp;ofi_rxm`").
inline constexpr size_t kRxmEagerBytes = 16384;
// How long a first-contact gate waits for the peer's message.
inline constexpr std::chrono::seconds kFirstContactWait{10};
// How long a send trusts the last look at its shm peer's process (a poll(2) at
// every send slows small all-reduces measurably: docs/performance.md,
// "Point-to-point against fi_pingpong"). A peer that dies is then missed by
// sends for at most this long, well inside the milliseconds its control
// connection takes.
inline constexpr std::chrono::microseconds kProcessCheckInterval{100};
// How often the wedge watchdog (shm) looks at the provider call running.
inline constexpr std::chrono::milliseconds kWatchdogInterval{250};
// How long a region lock must be seen held, at every try, before the watchdog
// releases it (Dead peers' locks): a running holder keeps it microseconds.
inline constexpr std::chrono::milliseconds kLockHeldProof{200};
inline constexpr int64_t Nanos(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

struct FabricOp;

// The context handed to libfabric: the provider owns `context` while the
// operation is in flight (FI_CONTEXT / FI_CONTEXT2 mode); `op` maps a CQ entry
// back to its operation.
struct OpContext {
  fi_context2 context;
  FabricOp* op;
};
static_assert(std::is_standard_layout_v<OpContext>);

struct FabricOp {
  // kPeek: a discard filter's fi_trecvmsg(FI_PEEK) (Transport::Discard);
  // kDrain: the receive that takes the message a peek found into `owned`.
  // No Request refers to either.
  // kContactSend / kContactRecv: the first-contact message of a peer pair.
  enum class Kind { kSend, kRecv, kPeek, kDrain, kContactSend, kContactRecv };
  static bool IsSend(Kind k) { return k == Kind::kSend || k == Kind::kContactSend; }
  // Made by the transport itself (no Request refers to it, Stats skip it).
  bool Internal() const { return kind != Kind::kSend && kind != Kind::kRecv; }
  bool IsContact() const { return kind == Kind::kContactSend || kind == Kind::kContactRecv; }
  // The libfabric call that posts it, for errors.
  const char* PostCall() const { return IsSend(kind) ? "fi_tsend" : "fi_trecv"; }

  OpContext ctx{};
  Kind kind = Kind::kSend;
  Rank peer = kAnySource;          // dest / source in the current membership
  fi_addr_t addr = FI_ADDR_UNSPEC;  // FI_ADDR_UNSPEC: any source
  Tag tag = 0;
  size_t length = 0;
  std::string peer_name;           // "rank 1 (node1)" or "any source"
  bool other_site = false;         // a send to a peer in another site
  void* data = nullptr;            // user buffer
  void* desc = nullptr;            // fi_mr_desc of `mr`, or null
  std::shared_ptr<void> mr;        // registration in use, if any
  bool in_backlog = false;         // waiting for provider queue space; under backlog_mu_
  bool gated = false;              // held until its peer's first contact; under contact_mu_

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> finished{false};  // result fixed; written under mu
  bool reaped = false;                // provider released ctx; under mu
  bool unreleased = false;            // its request gave up before the release; under mu
  Status cancel_reason;               // replaces FI_ECANCELED when set; under mu
  // When MarkPeerDead cancelled it in the provider (epoch: never): a later
  // CancelAndReap waits for the release only until cancel_timeout after
  // that, so N sends that rxm never releases to a dead peer cost one
  // cancel_timeout, not N of them one after the other. PeerSilent moves it
  // back so that the wait ends dead_peer_release_wait from then; PeerGone by
  // cancel_timeout: no wait. The earliest is kept. Under mu.
  Clock::time_point cancelled_at{};
  Status status;                      // under mu
  Completion completion;              // under mu

  // kSend / kRecv under an epoch key (Transport::SetEpochKey): the seal it
  // was posted under, and the trailer that goes after the payload on the
  // wire (a second iovec: the payload stays where the caller put it). A send
  // seals at its post; a receive opens in its request's thread once complete
  // (FabricCore::Unseal), never under cq_mu_.
  std::shared_ptr<DataSeal> seal;
  Rank self = -1;                    // this endpoint's rank when it was posted
  SealTrailer trailer{};
  void* trailer_desc = nullptr;      // fi_mr_desc of `trailer_mr`, or null
  std::shared_ptr<void> trailer_mr;
  // kRecv with a seal: why the message it took cannot be authenticated at all
  // (not a member, too short, truncated); set before Finish.
  std::string rejected;
  bool settled = false;              // kRecv with a seal: Unseal has run (the request's thread only)

  Tag ignore = 0;                    // kPeek: the filter's ignore bits
  std::vector<std::byte> owned;      // kDrain: the buffer it receives into
  std::shared_ptr<FabricOp> drain;   // kPeek: the drain it started; under cq_mu_

  std::string Describe() const {
    if (kind == Kind::kPeek) {
      return "peek for unreceived messages (tag " + std::to_string(tag) + ", ignore " +
             std::to_string(ignore) + ")";
    }
    if (kind == Kind::kDrain) {
      return "drain of an unreceived message from " + peer_name + " (tag " + std::to_string(tag) +
             ", " + std::to_string(length) + " bytes)";
    }
    if (IsContact()) {
      return std::string("first-contact message ") + (kind == Kind::kContactSend ? "to " : "from ") +
             peer_name;
    }
    return std::string(kind == Kind::kSend ? "send to " : "receive from ") + peer_name +
           " (tag " + std::to_string(tag) + ", " + std::to_string(length) + " bytes)";
  }
};

inline FabricOp* OpOf(void* op_context) { return static_cast<OpContext*>(op_context)->op; }

struct PeerTable {
  Rank self = -1;
  std::vector<fi_addr_t> addr;     // by rank
  std::vector<std::string> names;  // by rank
  std::vector<bool> dead;          // by rank
  std::vector<bool> other_site;    // by rank: PeerInfo::other_site
  std::unordered_map<fi_addr_t, Rank> rank_of;

  std::string Name(Rank r) const {
    std::string s = "rank " + std::to_string(r);
    if (r >= 0 && r < static_cast<Rank>(names.size()) && !names[r].empty()) {
      s += " (" + names[r] + ")";
    }
    return s;
  }
};

// The progress thread's longest nap while a request is blocked or backlogged
// and its polls have found nothing for `idle_for`: 100 us (at most
// `max_sleep`) for the first kLongBlockedWait, then `max_sleep`. Waits inside
// an all-reduce step keep the short naps (naps of a tenth of the wait so far
// slowed the 2-rank all-reduce by up to 60%); a wait of seconds on a frozen peer
// costs a thousand wake-ups a second, not ten thousand.
inline constexpr Clock::duration kLongBlockedWait = std::chrono::milliseconds(20);
std::chrono::microseconds BlockedNapCap(Clock::duration idle_for, std::chrono::microseconds max_sleep);

// Everything a request needs; shared by the transport and its requests so a
// request that outlives the transport still finds valid state.
class FabricCore : public std::enable_shared_from_this<FabricCore> {
 public:
  explicit FabricCore(const FabricOptions& options) : options_(options) {}
  ~FabricCore() { Shutdown(); }

  Status Open();
  // Closes the endpoint; every pending operation fails with `code`, its
  // message ending in `why`.
  void Shutdown(StatusCode code = StatusCode::kCancelled, const std::string& why = "transport closed");
  // Shutdown for a process about to exit, except that the provider's objects
  // stay open for the exit to reclaim: rxm 1.17's endpoint close can crash
  // after a partition (docs/libfabric.md). Ops fail and count as released,
  // as after Shutdown; the core must then never be destroyed.
  void ShutdownLeavingOpen(StatusCode code, const std::string& why);

  Result<RequestPtr> Post(FabricOp::Kind kind, Rank peer, Tag tag, void* data, size_t length);
  Status SetPeers(Rank self, std::span<const PeerInfo> peers);
  // PeerInfo::other_site of every rank, anew (sends posted after count by it).
  void SetOtherSites(const std::vector<bool>& other_site) {
    std::unique_lock lock(peers_mu_);
    if (other_site.size() == peers_.other_site.size()) peers_.other_site = other_site;
  }
  void MarkPeerDead(Rank peer);
  bool PeerMarkedDead(Rank peer) const;
  void PeerGone(Rank peer);    // Transport::PeerGone
  void PeerSilent(Rank peer);  // Transport::PeerSilent
  // Transport::Discard: adds a filter that Poll's sweeps apply.
  void Discard(TagFilter filter);
  // Transport::SetEpochKey: sends and receives posted from now on use `seal`.
  void SetSeal(std::shared_ptr<DataSeal> seal);
  // A finished sealed receive (fabric_seal.cc): verifies (and decrypts) the
  // message it took and returns the op, its completion naming the payload's
  // length; or drops it (counted, logged) and returns a fresh receive of the
  // same source, tag and buffer to wait on instead. Not under cq_mu_.
  Result<std::shared_ptr<FabricOp>> Unseal(std::shared_ptr<FabricOp> op);

  // Reads the CQ until empty; returns the number of completions handled.
  // `block` waits for the CQ lock instead of giving up when another thread polls.
  int Poll(bool block);
  Result<Completion> Wait(FabricOp& op, Deadline deadline);
  // fi_cancel, then drive progress until the op is reaped or cancel_timeout.
  void CancelAndReap(FabricOp& op, Status reason);
  // CancelAndReap unless the op is reaped, or was given up unreleased already.
  void Abandon(FabricOp& op);

  std::vector<uint8_t> local_address() const { return local_address_; }
  Rank rank() const {
    std::shared_lock lock(peers_mu_);
    return peers_.self;
  }
  int size() const {
    std::shared_lock lock(peers_mu_);
    return static_cast<int>(peers_.addr.size());
  }
  TransportStats Stats() const {
    TransportStats s;
    s.bytes_sent = bytes_sent_.load();
    s.bytes_received = bytes_received_.load();
    s.messages_sent = messages_sent_.load();
    s.messages_received = messages_received_.load();
    s.messages_discarded = messages_discarded_.load();
    s.messages_rejected = messages_rejected_.load();
    s.bytes_sent_across_sites = bytes_sent_across_sites_.load();
    return s;
  }
  std::string Describe() const { return describe_; }
  int UnreleasedBuffers() const { return unreleased_buffers_.load(); }
  // shm: see Transport::NeedsPeersInstalledBeforeFirstSend.
  bool needs_peers_installed_before_first_send() const { return peers_installed_before_first_send_; }
  // tcp;ofi_rxm in its eager mode: the eager limit (the overflow iovec's size); else 0.
  size_t eager_limit() const { return overflow_sink_.size(); }
  // shm: a fresh endpoint per membership epoch (see Epochs above).
  bool renews_endpoint_per_epoch() const { return renews_endpoint_per_epoch_; }
  FabricMrStats MrStats() const {
    FabricMrStats out;
    out.registering = registering_;
    if (mr_cache_) {
      const auto s = mr_cache_->Stats();
      out.hits = s.hits;
      out.misses = s.misses;
      out.evictions = s.evictions;
      out.entries = s.entries;
    }
    return out;
  }

 private:
  // Shutdown (close) or ShutdownLeavingOpen.
  void End(StatusCode code, const std::string& why, bool close);
  // An shm peer's process (Dead peers' locks).
  struct PeerProcess {
    ProcessWatch watch;
    std::string name;           // the peer's, as SetPeers named it
    std::string region;         // its endpoint's /dev/shm name
    bool exited = false;        // once seen (an exit is for good: no poll after)
    int64_t next_check_ns = 0;  // steady clock: sends before it trust the last check
    // Polls the watch until it has seen the exit; watch_mu_ held.
    bool Exited() {
      if (!exited) exited = watch.Exited();
      return exited;
    }
  };
  // What the watchdog needs of a peer whose process has exited.
  struct ExitedPeer {
    std::string name;
    pid_t pid;
    std::string region;
  };
  // The watched peers whose process has exited (each polled until it has).
  std::vector<ExitedPeer> ExitedPeers();
  // The processes of the shm peers whose addresses a SetPeers added to the AV.
  using PeerWatches = std::vector<std::pair<fi_addr_t, PeerProcess>>;
  // What a SetPeers settles of first contact (net only; see the header comment).
  struct FirstContacts {
    std::vector<std::pair<fi_addr_t, std::string>> send_to;     // this endpoint sends the message
    std::vector<std::pair<fi_addr_t, std::string>> await_from;  // gated until their message arrives
    std::vector<fi_addr_t> left_gates;                          // gates of peers that left
  };

  // Open's steps, in order (fabric_setup.cc). CheckProviderFits: the provider
  // matches enough tag bits for Chorus's tags, and only an shm endpoint is named.
  Status CheckProviderFits() const;
  // The per-provider choices (first contact, process watches, epochs,
  // discards, memory registration) and describe_.
  void ConfigureForProvider();
  Status OpenFabricAndDomain();
  Status OpenCqAndAv();
  // fi_endpoint, bound to the AV and CQ, named (shm epochs), enabled.
  Status OpenEndpoint();
  // kUnavailable naming options_.port, which another socket holds.
  Status PortInUse() const;
  // local_address_ = fi_getname.
  Status ReadLocalAddress();

  // SetPeers' steps (fabric_peers.cc). Fills `table` with each peer's AV
  // address and name, checking ranks and addresses; peers_mu_ held.
  Status AddPeersLocked(std::span<const PeerInfo> peers, PeerTable& table, PeerWatches& watches);
  // The AV address of `peer`, inserted the first time its address is seen
  // (when its process is watched, the watch joins `watches`); peers_mu_ held.
  Result<fi_addr_t> AvAddressLocked(const PeerInfo& peer, PeerWatches& watches);
  // Pending operations follow their peer to its rank in peers_, or fail if it
  // left; returns those that failed. peers_mu_ held.
  std::vector<std::shared_ptr<FabricOp>> FollowPeersLocked();
  // Adds the watches of a SetPeers to peer_processes_ (peers_mu_ not held).
  void InstallWatches(PeerWatches watches);

  // One fi_tsend / fi_trecv attempt (a kDrain is a receive); cq_mu_ held.
  ssize_t TryPost(FabricOp& op);
  // After a death over tcp;ofi_rxm, a peeked message above the eager size:
  // drains its tag from each live peer by name, or leaves it (a dead peer's)
  // and stops the filter (DiscardFilter). False where that does not apply.
  void DrainFromLivePeers(FabricOp& peek, const fi_cq_tagged_entry& entry);
  // A new op of `kind` whose context maps back to it.
  static std::shared_ptr<FabricOp> NewOp(FabricOp::Kind kind, Tag tag);
  // Sets the op's buffer, registered through the cache when the provider needs it.
  Status AttachBuffer(FabricOp& op, void* data, size_t length);
  // A send or receive posted under `seal` (Post): seals a send (into a
  // ciphertext copy the op owns when encrypting) and registers the trailer
  // where the provider needs it.
  Status AttachSeal(FabricOp& op, std::shared_ptr<DataSeal> seal);
  // FabricOptions::replay_fault for a send `op` just sealed (fabric_seal.cc).
  Status ReplayFault(const FabricOp& op);
  // A tracked op of the transport's own (first contact, drain) to or from
  // `addr`, with a buffer of `bytes` it owns; not yet posted.
  Result<std::shared_ptr<FabricOp>> NewOwnedOp(FabricOp::Kind kind, Tag tag, fi_addr_t addr,
                                               std::string peer_name, size_t bytes);
  // inflight_ owns an op from its post until its completion is reaped.
  void Track(std::shared_ptr<FabricOp> op);
  void Untrack(const FabricOp& op);
  // fi_cancel of each op, under cq_mu_; left to the next Poll when another
  // thread holds it (the caller may be the control thread: Dead peers' locks).
  void CancelInProvider(const std::vector<std::shared_ptr<FabricOp>>& ops);
  // The cancels CancelInProvider left; cq_mu_ held.
  void RunDeferredCancels();
  // fi_cancel of each op; cq_mu_ held, the endpoint open.
  void CancelLocked(std::span<const std::shared_ptr<FabricOp>> ops);
  // Runs `call` (a provider data-path call; cq_mu_ held), timed for the
  // watchdog with `peer` (ProviderCallClock::kNoPeer for none) where there is
  // one (shm): other providers' hot paths skip the clock.
  template <typename Call>
  auto InProvider(uint64_t peer, Call&& call) {
    if (!watches_peer_processes_) return call();
    ProviderCallScope scope(call_clock_, peer);
    return call();
  }
  // What a post that TryPost refused or failed (`ret` < 0) says, naming the op.
  Status PostFailure(const FabricOp& op, ssize_t ret) const;
  // A watch of the process behind shm peer `peer`'s address; none (warned
  // once) when the address names no pid or the kernel cannot watch it.
  std::optional<PeerProcess> WatchProcessOf(const PeerInfo& peer);
  // shm: true when the process behind `addr` has exited (false when not
  // watched), as a check at most kProcessCheckInterval old saw it.
  bool PeerProcessExited(fi_addr_t addr);
  // The error on_wedged gets when `running` is wedged (Dead peers' locks): some
  // peer's process has exited (a call to a live peer can spin on a lock that a
  // dead third process held).
  std::optional<Status> WedgedBy(const ProviderCallClock::Running& running);
  // Once a peer's process has exited, releases this endpoint's region lock and
  // exited peers' ones that a killed process left held (Dead peers' locks);
  // returns how many it released.
  int ReleaseLocksOfKilledHolders();
  void WatchdogLoop();
  // PeerGone and PeerSilent: the in-flight ops with `peer`, when it is marked
  // dead, give up waiting for the provider's release `wait` from now.
  void ReleaseWaitLeft(Rank peer, Clock::duration wait);
  // The in-flight ops with `addr` (MarkPeerDead, PeerGone): each one's
  // cancelled_at becomes `at` unless it is earlier already; with `fail`, each
  // is failed as its peer's death. Returns them.
  std::vector<std::shared_ptr<FabricOp>> CancelledWith(fi_addr_t addr, Clock::time_point at, bool fail);
  // Posts a tracked op, or queues it behind the backlog of its direction;
  // an error means the provider refused it (the op is untracked).
  Status Submit(const std::shared_ptr<FabricOp>& op);
  // Posts backlogged ops in order while the provider accepts them; cq_mu_ held.
  void DrainBacklog();
  // Removes `op` from its backlog or gate; true if it was there (never given to the provider).
  bool RemoveFromBacklog(FabricOp& op);
  // The backlog of the op's direction; backlog_mu_ held.
  std::deque<std::shared_ptr<FabricOp>>& BacklogOf(const FabricOp& op) {
    return backlog_[FabricOp::IsSend(op.kind) ? 0 : 1];
  }
  // The first-contact message from `addr` came (or its receive failed): the
  // next Poll opens its gate.
  void NoteContactArrived(fi_addr_t addr);
  // First contact with the peers of a SetPeers never named before, by
  // address order: sets up a gate for each peer it awaits, and lists the gates
  // of peers not in `table`. peers_mu_ held, contact_mu_ not.
  FirstContacts PlanFirstContacts(std::span<const PeerInfo> peers, const PeerTable& table);
  // Drops the gates of peers that left, then posts the first-contact messages
  // this endpoint owes and the receives of those it awaits; no lock held.
  void StartFirstContacts(const FirstContacts& plan);
  // Removes the gate of `addr` (dead or gone peer) and fails what it held with `why`.
  void DropGate(fi_addr_t addr, const std::string& why);
  // Posts, in order, the sends held by gates whose message arrived or whose
  // wait ran out; no lock held.
  void OpenGates();
  // Both return the number of completions of user operations handled (0 for
  // a discard filter's peek, so that sweeps do not keep the progress thread awake).
  int HandleCompletion(const fi_cq_tagged_entry& entry, fi_addr_t source);
  int HandleCqError();
  // SweepDiscards when the back-off allows it; cq_mu_ held.
  void SweepDiscardsWhenDue();
  // One fi_trecvmsg(FI_PEEK) from any source per discard filter with no peek
  // or drain in flight; cq_mu_ held. A miss completes with FI_ENOMSG.
  void SweepDiscards();
  // A peek found a message: receive it into a buffer of its own; cq_mu_ held.
  void StartDrain(FabricOp& peek, const fi_cq_tagged_entry& entry);
  // The next Poll sweeps, and the back-off starts again at kDiscardSweep.
  void SweepSoon();
  // Fixes the op's result (first writer wins) and, when `reaped`, releases it.
  void Finish(FabricOp& op, Status status, Completion completion, bool reaped);
  void FailLocked(FabricOp& op, Status status);  // op.mu held
  void ProgressLoop();
  void WakeProgress();
  Result<MrRegistration> Register(const void* address, size_t length);

  const FabricOptions options_;
  // Under rxm's eager mode (FabricOptions::rxm_eager_limit) every receive
  // ends with this iovec of the eager limit's size: a message longer than
  // its receive, up to the limit, spills into it instead of truncating,
  // which in that mode ends the connection's stream for good. What lands
  // here is never read; the completion's length names the message too long.
  std::vector<std::byte> overflow_sink_;
  std::string describe_;
  bool registering_ = false;

  // Declaration order = setup order; destruction closes the endpoint first.
  InfoOwner info_;
  FabricOwner fabric_;
  DomainOwner domain_;
  CqOwner cq_;
  AvOwner av_;
  std::unique_ptr<MrCache> mr_cache_;
  EpOwner ep_;
  std::vector<uint8_t> local_address_;
  std::atomic<uint64_t> next_mr_key_{1};

  mutable std::shared_mutex peers_mu_;
  PeerTable peers_;
  std::map<std::string, fi_addr_t> av_entries_;  // by address blob; under peers_mu_
  std::shared_ptr<DataSeal> seal_;               // SetSeal's; under peers_mu_
  // FabricOptions::replay_fault: the kept message (its op, whose buffer it
  // owns), and whether it went again. Under replay_mu_.
  std::mutex replay_mu_;
  std::shared_ptr<FabricOp> replay_;
  bool replayed_ = false;
  std::atomic<uint64_t> messages_rejected_{0};
  std::atomic<int64_t> next_reject_log_ns_{0};   // rejections are logged at most once a second

  // Serialises every call into the provider's data path (post, CQ read,
  // cancel): one thread at a time drives the endpoint even though it is
  // FI_THREAD_SAFE, since shm loses messages otherwise (docs/libfabric.md,
  // "How the fabric transport works").
  std::mutex cq_mu_;
  bool closed_ = false;  // under cq_mu_
  // Times the provider calls made under cq_mu_ (the watchdog's view; shm only, InProvider).
  ProviderCallClock call_clock_;
  std::mutex deferred_mu_;  // a leaf
  std::vector<std::shared_ptr<FabricOp>> deferred_cancels_;  // under deferred_mu_
  std::atomic<bool> has_deferred_cancels_{false};

  // shm (Dead peers' locks): the process behind each peer address. watch_mu_ is a leaf.
  bool watches_peer_processes_ = false;
  mutable std::mutex watch_mu_;
  std::unordered_map<fi_addr_t, PeerProcess> peer_processes_;  // under watch_mu_
  bool watch_unsupported_warned_ = false;                      // under watch_mu_
  bool layout_unknown_warned_ = false;                         // watchdog thread only

  std::mutex inflight_mu_;
  std::unordered_map<FabricOp*, std::shared_ptr<FabricOp>> inflight_;

  // Ops the provider refused for lack of queue space (-FI_EAGAIN, or shm's
  // -FI_ENOMEM), per kind, in post order: later ops of that kind queue behind
  // them so per-tag order holds. Sends and receives have separate queues so a
  // full receive queue never holds back the sends that would drain it.
  std::mutex backlog_mu_;
  std::deque<std::shared_ptr<FabricOp>> backlog_[2];  // [kSend], [kRecv]
  std::atomic<size_t> backlog_size_{0};

  // First contact (see the header comment); net only. Lock order: peers_mu_,
  // contact_mu_, backlog_mu_, cq_mu_; opened_mu_ is a leaf.
  struct Gate {
    std::deque<std::shared_ptr<FabricOp>> held;  // sends in post order
    Clock::time_point expires;
    std::string peer_name;
  };
  bool order_first_contact_ = false;
  bool peers_installed_before_first_send_ = false;  // shm (Transport::NeedsPeersInstalledBeforeFirstSend)
  bool renews_endpoint_per_epoch_ = false;          // shm (Epochs above)
  std::mutex contact_mu_;
  std::set<std::string> contacted_;    // peers whose first contact is settled; under contact_mu_
  std::unordered_map<fi_addr_t, Gate> gates_;      // under contact_mu_
  std::atomic<int> gates_count_{0};                // gates_.size(), read without the lock
  std::mutex opened_mu_;
  std::vector<fi_addr_t> opened_;                  // gates whose message arrived; under opened_mu_

  // Discard filters (Transport::Discard), the latest kMaxDiscardFilters.
  // Lock order: discard_mu_, then inflight_mu_.
  struct DiscardFilter {
    TagFilter filter;
    std::shared_ptr<FabricOp> peek;  // the latest peek (and its drain), until finished
    // Over tcp;ofi_rxm a peeked message above rxm's eager size may be the
    // rendezvous of a peer that died, froze or was cut off, and receiving it
    // from any source reads through the connection rxm tore down (a crash).
    // So such a tag is drained from each live peer by name
    // (`tags_by_source`); when a peek finds one of those tags again, the
    // message is a dead peer's: it stays queued and the filter sweeps no
    // more (`stopped`).
    std::vector<Tag> tags_by_source;
    bool stopped = false;
  };
  std::mutex discard_mu_;
  std::deque<DiscardFilter> discard_filters_;        // under discard_mu_
  std::string discard_unsupported_;                  // why not, when not; under discard_mu_
  bool discard_warned_ = false;                      // said so once; under discard_mu_
  std::atomic<bool> discarding_{false};              // any filter, and the provider can peek
  std::atomic<int64_t> next_sweep_ns_{0};            // steady clock
  std::atomic<int64_t> sweep_interval_ns_{Nanos(kDiscardSweep)};
  std::atomic<uint64_t> messages_discarded_{0};
  std::atomic<int> unreleased_buffers_{0};  // ops with `unreleased` set, not yet reaped

  std::atomic<int> blocked_waiters_{0};
  std::atomic<int> spinning_waiters_{0};  // Waits polling the CQ themselves
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  bool progress_wake_ = false;  // under progress_mu_
  bool progress_stop_ = false;  // under progress_mu_
  std::thread progress_thread_;
  std::condition_variable watchdog_cv_;  // with progress_mu_ and progress_stop_
  std::thread watchdog_thread_;          // shm only

  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, bytes_sent_across_sites_{0};
  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0};
};

// fi_getinfo for exactly `provider` (a "tcp" request must not yield
// "tcp;ofi_rxm"), bound to `bind_address` and `port` when either is set and
// the provider is not shm (port 0: any free port). `extra_caps` and
// `extra_order` add to the transport's hints (PairExchange asks for FI_RMA and
// FI_ORDER_SAW).
[[nodiscard]] Result<InfoOwner> GetInfo(std::string_view provider_name, const std::string& bind_address,
                                        uint16_t port = 0, uint64_t extra_caps = 0, uint64_t extra_order = 0);
inline Result<InfoOwner> GetInfo(FabricProvider provider, const std::string& bind_address, uint16_t port = 0,
                                 uint64_t extra_caps = 0, uint64_t extra_order = 0) {
  return GetInfo(ProviderName(provider), bind_address, port, extra_caps, extra_order);
}

// The eager mode an rxm endpoint runs in, given FabricOptions::rxm_eager_limit
// and rxm's variables as the user set them (null: unset), which win over the
// configuration as libfabric's variables do:
//  - FI_OFI_RXM_EAGER_LIMIT=N: N bytes go eagerly (an unreadable value: rxm's
//    own default, 16 KiB, taken as the rendezvous mode: limit 0);
//  - FI_OFI_RXM_ENABLE_DYN_RBUF off (0, false, no, off) without a limit: the
//    rendezvous mode, since rxm would then receive into bounce buffers of
//    its own, posted in advance at the limit's size, and copy out of them;
//  - neither: the configured limit.
// `note` says why the result differs from the configuration (empty when not).
inline constexpr size_t kRxmDefaultEagerLimit = 16384;  // rxm's own, and Chorus's SAR limit
struct RxmEagerPlan {
  size_t eager_limit = 0;  // 0: rxm's rendezvous above 16 KiB
  std::string note;
};
[[nodiscard]] RxmEagerPlan PlanRxmEager(size_t configured, const char* user_dyn_rbuf, const char* user_eager_limit);

// The Request handle of an op (fabric_transport.cc).
[[nodiscard]] Result<RequestPtr> MakeFabricRequest(std::shared_ptr<FabricCore> core,
                                                   std::shared_ptr<FabricOp> op);

}  // namespace chorus::gossip::fabric
