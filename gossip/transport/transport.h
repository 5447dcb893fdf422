// gossip/transport/: the Transport interface every algorithm talks to; its
// implementations are fabric/ (libfabric) and local/ (in process).
//
// Transport: tagged byte messages between the ranks of one membership epoch.
//
// Every all-reduce and gossip algorithm talks to this interface and never to
// libfabric. Implementations: transport/fabric (libfabric RDM endpoints: the
// real one) and transport/local (in process, for tests and simulation).
//
// Semantics (the conformance suite in tests/gossip/transport/transport_conformance_test.cc
// checks them for every implementation):
//  - Messages between one (source, destination, tag) are received in send order.
//  - Tags have 63 bits (0..kMaxTag) on every transport, since one provider keeps
//    the top bit for itself; a larger tag is kInvalidArgument. kReservedTag, all
//    63 bits set, is the transports' own (kInvalidArgument too).
//  - A receive matches a message with the same tag from `source`, or from any
//    rank when source == kAnySource; the completion names the actual source.
//  - A received message longer than the receive buffer is an error (kDataLoss)
//    naming the peer, and the transport stays usable with that peer (later
//    messages arrive; ones the peer had already sent may be lost). Lengths in
//    Chorus's protocols are fixed by both sides, so a truncation means a bug or
//    a bad peer, never normal operation. Under an epoch key (SetEpochKey) a
//    truncated message cannot be authenticated and is dropped (counted) like
//    any message that fails its seal, and the receive stays posted for the
//    real one (a bad peer's message must not end an honest exchange).
//  - A message shorter than the receive buffer leaves the buffer's bytes
//    past its length unspecified (a sealed message's trailer lands there).
//  - Buffers must stay alive and untouched until the request completes or is
//    cancelled and released; a request destroyed while pending is cancelled.
//    A cancel the provider does not release in time leaves the buffer in its
//    hands (Request::Release, Transport::UnreleasedBuffers).
//  - Every wait takes a Deadline. A peer that does not answer in time gives
//    kDeadlineExceeded; a peer known dead gives kUnavailable; both messages
//    name the peer's rank and address.
//  - Discard(filter) drops the matching messages that no receive will
//    ever take (a failed membership epoch's), waiting or arriving later.
// What each libfabric provider does behind these rules: docs/libfabric.md
// ("libfabric 1.17 behaviours and what the transport does").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/transport/event_order.h"

namespace chorus::gossip {

using Rank = int32_t;
using Tag = uint64_t;
inline constexpr Rank kAnySource = -1;
inline constexpr Tag kMaxTag = (Tag{1} << 63) - 1;
// The tag a transport keeps for its own messages (the fabric transport's first
// contact over net). Gossip and collective tags never set all 63 bits.
inline constexpr Tag kReservedTag = kMaxTag;
inline constexpr size_t kMaxDiscardFilters = 16;
// The key that authenticates one membership epoch's data-plane messages
// (Transport::SetEpochKey).
using DataKey = std::array<uint8_t, 32>;

// A set of tags for Transport::Discard: those equal to `tag` on the bits that
// `ignore` leaves clear (libfabric's tag matching).
struct TagFilter {
  Tag tag = 0;
  Tag ignore = 0;

  bool Matches(Tag t) const { return ((tag ^ t) & ~ignore) == 0; }
};

// kInvalidArgument naming the tag when it is above kMaxTag or is kReservedTag
// (every Isend / Irecv checks).
[[nodiscard]] Status CheckTag(Tag tag);

struct Completion {
  Rank source = -1;
  Tag tag = 0;
  size_t bytes = 0;
};

// A pending send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // Non-blocking: true once complete (successfully or not).
  virtual bool Done() = 0;
  // Blocks (with back-off, never a pure spin) until complete or the deadline.
  [[nodiscard]] virtual Result<Completion> Wait(Deadline deadline) = 0;
  // Cancels a pending request; a no-op once complete.
  virtual void Cancel() = 0;
  // Gives the request up: cancels it if pending, then waits (at most the
  // transport's cancel timeout) until the provider has let go of its buffer.
  // False when it has not: the provider may still read or write that buffer
  // (Transport::UnreleasedBuffers), and the caller must keep it for good
  // (KeepForGood). Transports that copy release at once.
  virtual bool Release() {
    Cancel();
    return true;
  }
};
using RequestPtr = std::unique_ptr<Request>;

struct PeerInfo {
  Rank rank = -1;
  std::vector<uint8_t> address;  // opaque data-plane address (fi_getname blob)
  std::string name;              // human-readable, used in errors ("node2@127.0.0.1:4002")
  // In another site than this endpoint (cluster.site): what is sent to it
  // counts in TransportStats::bytes_sent_across_sites too.
  bool other_site = false;
};

struct TransportStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t messages_discarded = 0;  // dropped unreceived by Discard
  // Dropped unused because they failed authentication (SetEpochKey): forged,
  // altered, of another epoch, replayed, or from an endpoint that is not a member.
  uint64_t messages_rejected = 0;
  // Of bytes_sent, those to peers in another site (PeerInfo::other_site).
  uint64_t bytes_sent_across_sites = 0;

  TransportStats& operator+=(const TransportStats& o) {
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    messages_sent += o.messages_sent;
    messages_received += o.messages_received;
    messages_discarded += o.messages_discarded;
    messages_rejected += o.messages_rejected;
    bytes_sent_across_sites += o.bytes_sent_across_sites;
    return *this;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // This endpoint's data-plane address, to be published over the control plane
  // once: it stays the same across BeginEpoch.
  virtual std::vector<uint8_t> LocalAddress() const = 0;
  // Membership epoch `epoch` begins: call it before that epoch's SetPeers. A
  // transport that cannot drop what an ended epoch left behind (see Discard)
  // opens a fresh endpoint for the epoch here, named after its published
  // address and the epoch so that its peers find it without an exchange, and
  // every request of the old endpoint fails with kUnavailable (the fabric
  // transport over shm: fabric_core.h); the others keep their endpoint, and
  // this is a no-op. The addresses in SetPeers stay the published ones. Where
  // NeedsPeersInstalledBeforeFirstSend, every member must have begun the
  // epoch before any calls SetPeers (else a peer's messages may reach the
  // wrong endpoint), and must have installed it before the first message (two
  // barriers).
  [[nodiscard]] virtual Status BeginEpoch(uint64_t /*epoch*/) { return Status::Ok(); }
  // The members of membership epoch `epoch` share `key` (from the control
  // plane; nobody else knows it): from this call on, every message this
  // endpoint sends carries a MAC under it, bound to sender, receiver, epoch
  // and tag, and a received message that does not verify (forged, altered,
  // of another epoch, replayed, or from an endpoint that is not a member) is
  // dropped and counted (TransportStats::messages_rejected), never delivered.
  // From an endpoint that is not a member, the receive stays posted for the
  // real message; from a member's own connection no real one follows (its
  // bytes changed after sealing, or someone holds its address), and the
  // receive fails with kDataLoss naming it. Call it after BeginEpoch
  // and before SetPeers; calling it again with the same epoch and key changes
  // nothing. Requests posted before keep the key they were posted under. A
  // transport configured not to authenticate, or with nothing to guard (the
  // in-process one; the fabric one over shm: docs/design.md, "Authenticated
  // data plane"), ignores it.
  [[nodiscard]] virtual Status SetEpochKey(uint64_t /*epoch*/, const DataKey& /*key*/) {
    return Status::Ok();
  }

  // Installs the members of a membership epoch: `self` is this endpoint's rank,
  // `peers` lists every rank (including self). Pending requests to ranks that
  // are gone complete with kUnavailable. A send to a peer may not complete
  // before that peer has installed a view naming this endpoint (over net the
  // fabric transport orders each pair's first contact: fabric_core.h).
  [[nodiscard]] virtual Status SetPeers(Rank self, std::span<const PeerInfo> peers) = 0;

  // Which peers are in another site (PeerInfo::other_site), by rank, when
  // the sites change within an epoch (measured after SetPeers). Counting
  // only; transports that count nothing ignore it.
  virtual void SetOtherSites(const std::vector<bool>& /*other_site*/) {}
  virtual Rank rank() const = 0;
  virtual int size() const = 0;

  [[nodiscard]] virtual Result<RequestPtr> Isend(Rank dest, Tag tag,
                                                 std::span<const std::byte> data) = 0;
  [[nodiscard]] virtual Result<RequestPtr> Irecv(Rank source, Tag tag,
                                                 std::span<std::byte> data) = 0;

  // Marks a peer dead (from the membership layer): its pending and future
  // requests fail at once with kUnavailable naming it.
  virtual void MarkPeerDead(Rank peer) = 0;
  // Whether MarkPeerDead(peer) was called since the last SetPeers: for waits
  // that do not go through the transport (HostSegment's) to end with it too.
  virtual bool PeerMarkedDead(Rank peer) const = 0;
  // After MarkPeerDead(peer): the peer's process can no longer touch this
  // process's buffers (it is gone, or it ended its operations before it said
  // it stops), so a request with it that the provider has not released after
  // the cancel is given up at once, not after the transport's cancel timeout
  // (a provider may never release a send to a dead peer). Bookkeeping only: no
  // provider call, so it may come at any time. Nothing to do for transports
  // that hold no provider contexts.
  virtual void PeerGone(Rank /*peer*/) {}
  // After MarkPeerDead(peer): the peer was declared dead for its silence (it
  // may be frozen or cut off, not gone). A request with it that the provider
  // has not released after the cancel is given up after a short wait
  // (FabricOptions::dead_peer_release_wait) rather than the cancel timeout,
  // and counts as unreleased. Not for the other members whose operations
  // end with the epoch, except where the nodes follow new views at their own
  // pace (a join must pause nobody; node/cluster/installed_peers.h).
  // Bookkeeping only, like PeerGone.
  virtual void PeerSilent(Rank /*peer*/) {}

  // Drops, unreceived, every message from any peer whose tag `filter`
  // matches: those waiting for a receive now and
  // those that arrive later (a posted receive still takes a message first).
  // For messages no receive will ever be posted for: those of a membership
  // epoch that a failure ended, which would otherwise hold back the sender's
  // later messages or never let its send complete. The latest
  // kMaxDiscardFilters filters stay active. A transport that cannot discard
  // leaves the ended epoch's messages behind with the endpoint BeginEpoch
  // replaces, and Discard logs once, on an endpoint that no BeginEpoch opened,
  // that it cannot.
  virtual void Discard(TagFilter filter) = 0;

  // True when a message to a peer may never complete if it arrives before
  // that peer's SetPeers has installed this endpoint: the callers then hold
  // their first sends until every member has installed the epoch (a control
  // plane barrier). True for the fabric transport over shm: docs/libfabric.md
  // ("`shm`").
  virtual bool NeedsPeersInstalledBeforeFirstSend() const { return false; }

  // Messages up to this many bytes go without a handshake and longer ones by
  // rendezvous (the fabric transport over tcp;ofi_rxm in its eager mode, the
  // same on every member); 0 where every size goes the same way. Collectives
  // size their segments by it (DefaultSegmentBytes).
  virtual size_t EagerLimit() const { return 0; }

  // Operations whose request gave up while the provider still held their
  // buffer (a cancel not released in time, for example a message half
  // received from, or half sent to, a peer that froze): the provider may
  // still write into a receive's buffer and read from a send's. A caller that
  // owns buffers it gave to sends or receives must not free or reuse them
  // while this is above zero; it keeps them (GossipExchange retires its
  // protocol instead of destroying it). 0 for transports that copy, or always
  // release.
  virtual int UnreleasedBuffers() const { return 0; }

  // The process exits next, after a failure: the transport stops its threads
  // and fails what is pending, and may leave provider objects for the exit to
  // reclaim rather than close them (over tcp;ofi_rxm, whose endpoint close
  // can crash after a partition: docs/libfabric.md). Nothing is sent or
  // received afterwards.
  virtual void EndForExit() {}

  // The simulation's event order (event_order.h) where the transport keeps
  // one (the in-process transport under ordered virtual time); null
  // elsewhere: events happen when they happen.
  virtual EventOrder* Order() { return nullptr; }

  virtual TransportStats Stats() const = 0;
  // "local", "fabric(tcp;ofi_rxm 117.0)"...
  virtual std::string Describe() const = 0;

  // Blocking helpers built on the above.
  [[nodiscard]] Status Send(Rank dest, Tag tag, std::span<const std::byte> data,
                            Deadline deadline);
  [[nodiscard]] Result<Completion> Recv(Rank source, Tag tag, std::span<std::byte> data,
                                        Deadline deadline);
};

// Moves `buffer` into storage that is never freed: the heap memory it held,
// which a provider may still read or write, stays valid for the process's
// life. `buffer` is left empty (moved from).
template <typename Buffer>
void KeepForGood(Buffer& buffer) {
  (void)new Buffer(std::move(buffer));
}

// KeepForGood(buffer) while `transport` holds any buffer it could not
// release (Transport::UnreleasedBuffers): for an owner that cannot tell which
// of its requests the provider kept, whose requests are gone and which would
// free or reuse `buffer` next.
template <typename Buffer>
void KeepWhileUnreleased(const Transport& transport, Buffer& buffer) {
  if (transport.UnreleasedBuffers() > 0) KeepForGood(buffer);
}

// Releases every request (Request::Release) and empties the list. False when
// the provider kept the buffer of one of them: the caller then keeps every
// buffer those requests used (KeepForGood).
[[nodiscard]] bool ReleaseAll(std::vector<RequestPtr>& requests);

// ReleaseAll(requests), and KeepForGood on each of `buffers` (those the
// requests used) when the provider kept one of them: the way out of a call
// whose requests failed.
template <typename... Buffers>
void ReleaseOrKeep(std::vector<RequestPtr>& requests, Buffers&... buffers) {
  if (!ReleaseAll(requests)) (KeepForGood(buffers), ...);
}

// Waits for all requests; returns the first error (and cancels the rest).
[[nodiscard]] Status WaitAll(std::span<RequestPtr> requests, Deadline deadline);

}  // namespace chorus::gossip
