// EventOrder: the order of events in a simulation whose nodes answer one
// another from threads of their own (Transport::Order; only the in-process
// transport under ordered virtual time has one, local_transport.h).
//
// A protocol with a server thread (pairwise gossip's responder) has two
// actors per node, each with a virtual clock: the owner (the node's training
// thread, on the node's clock) and the server (its own clock). In a
// simulation, an answer is sent at a virtual moment, and what it carries must
// be what the node held at that moment: every event that reads or changes
// state a peer's message also touches must run after every earlier event of
// the whole simulation. The transport keeps a lower bound on the time of each
// actor's next event (an actor that computes: its clock; one waiting for a
// message: the message's arrival once it is sent, unbounded before; a parked
// one: unbounded) and lets an actor go only when its event is the earliest of
// them all (ties: by node, the owner first), so the earliest event can always
// go and nothing waits for a later one (a conservative discrete-event
// simulation). Under it, every receive's wait on that transport is such an
// event; the calls here are the rest.
//
// Must not: be used from a thread other than the node's owner, or its server
// between ServeHere and CloseServing.
#pragma once

#include "common/clock.h"
#include "common/status.h"

namespace chorus::gossip {

using Rank = int32_t;
using Tag = uint64_t;

class EventOrder {
 public:
  virtual ~EventOrder() = default;

  // Owner: waits until its clock's moment is the earliest event, so that
  // every earlier event (a request its server took) has run.
  [[nodiscard]] virtual Status AwaitTurn(Deadline deadline) = 0;
  // Owner: its clock moves `seconds` forward (a pause between attempts).
  virtual void Pause(double seconds) = 0;

  // Owner, before its server thread starts: the server's clock starts at the
  // owner's, and its next event is the earliest message with `tag` from any
  // source. Its thread calls ServeHere first; the owner calls CloseServing
  // once that thread has ended.
  virtual void OpenServing(Tag tag) = 0;
  virtual void ServeHere() = 0;
  virtual void CloseServing() = 0;
  // Server: waits until the earliest message with the served tag is the
  // earliest event and returns its source (a receive from it then takes that
  // message). kDeadlineExceeded at the deadline, with nothing taken.
  [[nodiscard]] virtual Result<Rank> AwaitMessage(Deadline deadline) = 0;

  // Owner: it is about to wait for a condition that only its server's events
  // change (a neighbour's notice): it holds nobody back until Unpark, which
  // waits for its turn at its clock (moved by WakeOwner).
  virtual void Park() = 0;
  [[nodiscard]] virtual Status Unpark(Deadline deadline) = 0;
  // Server: the event it is running may have met the parked owner's
  // condition: the owner's clock moves to this event's moment and it holds
  // the others back from there until it parks again or runs.
  virtual void WakeOwner() = 0;
};

}  // namespace chorus::gossip
