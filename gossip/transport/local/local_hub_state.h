// The hub's internal state (local_transport.cc and local_event_order.cc):
// requests, queued messages, slots and, under ordered virtual time, their
// lanes. Everything here is guarded by the hub's mutex.
#pragma once

#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gossip/transport/local/local_transport.h"

namespace chorus::gossip {

struct LocalHub::Op {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  int owner = -1;           // slot that posted it
  Rank peer = kAnySource;   // dest (send) or source (recv), in the owner's view
  int peer_slot = -1;       // -1: any source
  Tag tag = 0;
  std::span<std::byte> recv_buffer;
  bool done = false;
  bool posted = false;      // still in the owner's posted list, at `pos`
  std::list<std::shared_ptr<Op>>::iterator pos;
  Status status;
  Completion completion;
  Clock::time_point visible_at = Clock::time_point::min();  // link model delay
  double virtual_done = 0.0;  // virtual time: send NIC done / receive arrival
  int lane = LocalHub::kOwnerLane;  // ordered virtual time: the lane that posted it
  std::condition_variable cv;
};

struct LocalHub::Message {
  int from = -1;
  Tag tag = 0;
  std::vector<std::byte> data;
  Clock::time_point ready_at;
  double virtual_arrival = 0.0;
  std::shared_ptr<Op> send_op;
};

// Ordered virtual time: one actor of a slot (local_transport.h).
struct LocalHub::Lane {
  enum class State {
    kOff,      // no actor: holds nobody back
    kRunning,  // its next event is at its clock or later
    kTurn,     // waits for its turn at its clock
    kOp,       // waits for `op`: its arrival once matched
    kMessage,  // server: waits for the earliest message with `tag`
    kParked,   // owner: waits for its server (WakeOwner)
  };
  State state = State::kOff;
  double clock = 0.0;  // the server's (the owner's is Slot::virtual_now)
  const Op* op = nullptr;
  Tag tag = 0;
  std::condition_variable cv;
};

struct LocalHub::Slot {
  std::string name;
  bool dead = false;
  Rank self = -1;
  std::vector<int> rank_to_slot;       // this slot's view of the membership
  std::vector<std::string> rank_names;
  std::vector<bool> peer_dead;         // by rank, from MarkPeerDead
  std::vector<bool> peer_other_site;   // by rank, PeerInfo::other_site
  std::deque<Message> unexpected;
  std::list<std::shared_ptr<Op>> posted;
  std::deque<TagFilter> discard;  // the latest kMaxDiscardFilters
  std::vector<Clock::time_point> link_free_at;  // by destination slot
  double virtual_now = 0.0;       // virtual time: this slot's clock
  double virtual_nic_free = 0.0;  // virtual time: when its NIC is free again
  Lane lanes[2];                  // ordered virtual time: owner, server
  TransportStats stats;
};

}  // namespace chorus::gossip
