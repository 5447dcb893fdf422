// gossip/transport/local/: the in-process Transport (tests and `chorus simulate`).
//
// LocalTransport: the in-process Transport, for tests and simulation.
//
// A LocalHub owns the mailboxes of N endpoints ("slots"); MakeTransport(slot)
// gives the Transport of one slot, used by one thread (or several). Messages are
// copied into the destination's mailbox and matched on (source, tag) in arrival
// order, so order per (source, destination, tag) is preserved. Waits block on a
// condition variable with the deadline; nothing spins.
//
// Failure injection: LocalHub::Kill(slot) makes a slot dead: its peers' pending
// and future operations to or from it fail with kUnavailable naming it (messages
// it delivered before dying can still be received). A peer that is alive but
// silent is only noticed by deadlines (kDeadlineExceeded).
//
// Optional real-time link model (emulation in tests): each message is delayed
// by latency + bytes / bandwidth of wall time, serialised per (source,
// destination) link.
//
// Optional virtual time (simulation, `chorus simulate`): nothing is delayed in
// wall time; instead every slot has a clock in virtual seconds that its owner
// moves forward for modelled compute (AdvanceVirtual) and that the transport
// moves on communication. With latency alpha and bandwidth beta, a send of B
// bytes made when the sender's clock reads t occupies the sender's NIC (one per
// slot, shared by all its destinations) from start = max(t, nic_free) to
// done = start + B / beta; the message arrives at done + alpha. A completion
// observed through Request::Wait moves the owner's clock to
// max(clock, done) for a send and max(clock, arrival) for a receive; Done() is
// a probe and moves nothing. The receiving NIC is not modelled (no incast
// contention). When virtual time is on, the real-time link model is ignored.
// Optionally (LocalVirtualTime::cpu_charge) the CPU work between calls also
// moves the clock: Isend, Irecv and Wait first add what the callback says the
// calling thread computed for that slot, so the work before a send delays it;
// the calls' own work (copying messages) is the link model's and is not
// charged (cpu_resume marks where the caller's work starts again).
//
// Ordered virtual time (LocalVirtualTime::ordered, for protocols that answer
// from a thread of their own): LocalTransport::Order() gives the
// simulation's event order (event_order.h). Each slot has an owner lane (its
// clock) and, while a server is open, a server lane with a clock of its own;
// a thread that called ServeHere sends and waits on the server lane, every
// other thread on the owner lane. Every receive's Wait then returns only when
// its message's arrival is the earliest event of the hub, and moves that
// lane's clock to it; a send is stamped with the sending lane's clock, and
// its Wait moves no clock but the owner's for the owner's own sends. Done()
// of a receive is true only when its Wait would return at once. Waits of
// threads on the owner lane must not overlap (the lane has one state).
//
// Must not: touch libfabric or the network; share a hub between unrelated tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gossip/transport/event_order.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

// Delay model of every link of a hub. A default-constructed model delays nothing.
struct LocalLinkModel {
  std::chrono::nanoseconds latency{0};  // added to every message
  double bytes_per_second = 0;           // <= 0: infinite bandwidth
};

// Virtual-time link model (see the file comment). Off by default.
struct LocalVirtualTime {
  bool enabled = false;
  double latency_s = 0.0;         // alpha, virtual seconds added to every message (>= 0)
  double bytes_per_second = 0.0;  // beta, per sender NIC; <= 0: infinite bandwidth
  // Optional CPU accounting. cpu_charge: the virtual seconds of CPU work to
  // add to `slot`'s clock, asked on the calling thread at the start of every
  // Isend, Irecv and Wait of that slot, before the call is stamped (< 0 is 0).
  // cpu_resume: told on the same thread when that call returns, so that the
  // call's own work is not charged. Both are called without the hub's mutex,
  // from any thread that uses the slot. Null: only bytes and latency cost time.
  std::function<double(int slot)> cpu_charge;
  std::function<void(int slot)> cpu_resume;
  // Sites: slot s is in site site_of_slot[s] (empty: all in one). A message
  // to another site, once it has left the sender's NIC, crosses its site's
  // uplink (one per site, serialised over everything the site sends out, at
  // site_bytes_per_second; <= 0: infinite) and arrives site_latency_s later
  // than it would inside a site. The receiving site's downlink is not
  // modelled.
  std::vector<int> site_of_slot;
  double site_latency_s = 0.0;
  double site_bytes_per_second = 0.0;
  // Events in virtual-time order (file comment); needs enabled.
  bool ordered = false;
};

struct LocalHubOptions {
  int world_size = 2;         // number of slots (endpoints)
  LocalLinkModel link;        // optional real-time delays (ignored under virtual time)
  LocalVirtualTime virtual_time;  // optional virtual clocks (simulation)
  std::string name_prefix = "local";  // peers are named "<prefix><slot>"
};

class LocalHub;

// The Transport of one hub slot. Created by LocalHub::MakeTransport.
class LocalTransport final : public Transport, private EventOrder {
 public:
  LocalTransport(std::shared_ptr<LocalHub> hub, int slot);
  ~LocalTransport() override;

  std::vector<uint8_t> LocalAddress() const override;
  [[nodiscard]] Status SetPeers(Rank self, std::span<const PeerInfo> peers) override;
  Rank rank() const override;
  int size() const override;
  [[nodiscard]] Result<RequestPtr> Isend(Rank dest, Tag tag,
                                         std::span<const std::byte> data) override;
  [[nodiscard]] Result<RequestPtr> Irecv(Rank source, Tag tag,
                                         std::span<std::byte> data) override;
  void MarkPeerDead(Rank peer) override;
  bool PeerMarkedDead(Rank peer) const override;
  void Discard(TagFilter filter) override;
  TransportStats Stats() const override;
  void SetOtherSites(const std::vector<bool>& other_site) override;
  std::string Describe() const override;
  // This transport under ordered virtual time, else null.
  EventOrder* Order() override;

  int slot() const { return slot_; }

 private:
  // EventOrder (event_order.h), on this slot's lanes.
  Status AwaitTurn(Deadline deadline) override;
  void Pause(double seconds) override;
  void OpenServing(Tag tag) override;
  void ServeHere() override;
  void CloseServing() override;
  Result<Rank> AwaitMessage(Deadline deadline) override;
  void Park() override;
  Status Unpark(Deadline deadline) override;
  void WakeOwner() override;

  friend class LocalHub;
  std::shared_ptr<LocalHub> hub_;
  const int slot_;
};

class LocalHub : public std::enable_shared_from_this<LocalHub> {
 public:
  static std::shared_ptr<LocalHub> Create(const LocalHubOptions& options);

  // The transport of `slot` (0 <= slot < world_size), with its peers already set
  // to every slot (rank == slot). May be called again after the previous one is
  // destroyed.
  Result<std::unique_ptr<LocalTransport>> MakeTransport(int slot);
  // One transport per slot, in slot order.
  std::vector<std::unique_ptr<Transport>> MakeAll();

  // Kills a slot: see the file comment.
  void Kill(int slot);
  bool IsDead(int slot) const;

  int world_size() const { return static_cast<int>(slots_.size()); }
  std::string SlotName(int slot) const;

  // Virtual time (options.virtual_time.enabled; otherwise these read 0 and do
  // nothing). The clock of `slot` in virtual seconds, starting at 0.
  double VirtualNow(int slot) const;
  // Moves the clock of `slot` forward by `seconds` (modelled compute; < 0 is 0).
  void AdvanceVirtual(int slot, double seconds);
  // Moves the clock of `slot` to max(clock, `time`).
  void AdvanceVirtualTo(int slot, double time);
  // The virtual time at which the NIC of `slot` is free again.
  double VirtualNicFree(int slot) const;

  // Encodes / decodes a slot as a LocalAddress() blob.
  static std::vector<uint8_t> EncodeAddress(int slot);
  static Result<int> DecodeAddress(std::span<const uint8_t> address);

  // Internal state shared with requests; public only so the .cc can name it.
  struct Op;
  struct Message;
  struct Slot;
  struct Lane;
  static constexpr int kOwnerLane = 0;
  static constexpr int kServerLane = 1;

  explicit LocalHub(const LocalHubOptions& options);
  // Cancels a pending op (hub mutex held): it leaves its posted list at once.
  void CancelLocked(Op& op, Status status);
  // Virtual time: a successful completion of `op` observed by its owner through
  // Wait (hub mutex held): moves the owner's clock (see the file comment).
  void ObserveCompletionLocked(const Op& op);
  // Virtual time: cpu_charge's seconds for `slot` on this thread (0 without
  // one), asked before the mutex is taken; ChargeLocked adds them to its clock;
  // CpuResume calls cpu_resume (after the mutex is released).
  double CpuCharge(int slot) const;
  void ChargeLocked(int slot, double seconds);
  void CpuResume(int slot) const;

  // Ordered virtual time (local_event_order.cc; hub mutex held throughout).
  bool Ordered() const { return options_.virtual_time.enabled && options_.virtual_time.ordered; }
  // The lane of the calling thread on `slot`: kServerLane after its ServeHere.
  int LaneOfCallerLocked(int slot) const;
  double& LaneClockLocked(int slot, int lane);
  // The earliest time of the lane's next event (+inf: none known).
  double BoundLocked(int slot, int lane) const;
  // The lane (2 * slot + lane) whose next event is the hub's earliest (ties:
  // lower slot, then the owner); -1 when no bound is known.
  int FirstLaneLocked() const;
  bool IsFirstLocked(int slot, int lane) const { return FirstLaneLocked() == 2 * slot + lane; }
  // The earliest queued message with the tag `slot`'s server takes, from a
  // member (ties: the lower slot); null when none.
  const Message* ServedMessageLocked(int slot) const;
  // One wait of a lane for its turn (woken by ScheduleLocked), until the
  // deadline or at most a second when it has none.
  void WaitOnLaneLocked(std::unique_lock<std::mutex>& lock, Lane& lane, Deadline deadline);
  // Wakes the lane whose event is now the earliest, when it waits for that.
  void ScheduleLocked();
  // Ordered Wait of a receive (LocalRequest::Wait).
  Result<Completion> OrderedWaitLocked(std::unique_lock<std::mutex>& lock, Op& op, Deadline deadline,
                                       const std::string& peer_name);
  bool OrderedDoneLocked(const Op& op) const;
  // A slot's lanes: on at MakeTransport, off when its transport goes.
  void SetLanesLocked(int slot, bool on);

 private:
  friend class LocalTransport;
  friend class LocalRequest;

  Result<RequestPtr> Send(int from, Rank dest, Tag tag, std::span<const std::byte> data);
  Result<RequestPtr> Recv(int at, Rank source, Tag tag, std::span<std::byte> data);
  Status SetPeersLocked(int at, Rank self, std::span<const PeerInfo> peers);
  void MarkPeerDeadLocked(int at, Rank peer);
  void FailOpLocked(Op& op, Status status);
  std::string PeerNameLocked(int at, Rank peer) const;
  // Rank of `from_slot` in the view of slot `at`, or -1.
  Rank RankOfSlotLocked(int at, int from_slot) const;
  Clock::time_point DeliveryTimeLocked(int from, int to, size_t bytes);
  // Virtual time: the sender's NIC done time and the arrival time of a send of
  // `bytes` from slot `from` to slot `to` now (in its clock); reserves the NIC,
  // and the site's uplink when `to` is in another site.
  std::pair<double, double> VirtualSendLocked(int from, int to, size_t bytes);

  const LocalHubOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<double> site_uplink_free_;  // virtual time: by site, when its uplink is free again
};

}  // namespace chorus::gossip
