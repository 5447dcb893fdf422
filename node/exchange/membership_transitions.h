// MembershipTransitions: how a node's exchange moves from one membership
// epoch to the next, as the training loop sees it. Kept apart from Exchange,
// whose hooks run at every step: the loop consults this only where the
// membership changes (an admission, a join, a resume) and, after each step,
// for what a re-form inside the step left it to do.
//
// Two modes (docs/design.md, "Membership modes"), chosen by the exchange and
// the stop rule (PacingOf in node/run/training_loop.h), never by the order in
// which the nodes started:
//
//   lock step  every member of the epoch before meets a change between the
//              same two steps and takes part in it: a collective over the
//              new view installs the peers, gives joiners the live state and
//              agrees on the step to go on from (all-reduce, the outer
//              exchanges, D-PSGD, CHOCO, push-sum; pairwise gossip under
//              train.stop = "epochs").
//   own pace   each node follows a view between two of its own steps, with
//              no collective: rank 0 pushes the live state to the members
//              new to it and trains on (pairwise gossip under
//              train.stop = "samples").
//
// Must not: run per-step work (Exchange does), or decide membership (the
// control plane does).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "node/control/membership.h"

namespace chorus::node {

class MembershipTransitions {
 public:
  virtual ~MembershipTransitions() = default;
  // An admission moved the membership to `next` (joiners at its end): every
  // member of the epoch before calls it between steps, before step
  // `next_step`. Rebuilds over `next` and gives the joiners the live state,
  // while they call Joined. A member lost meanwhile is handled as any
  // failure (exchange.on_failure).
  [[nodiscard]] virtual Status Admit(const MembershipView& /*next*/, int64_t /*next_step*/) {
    return Status::Ok();
  }
  // This node joined a running cluster (ClusterSession::joined_running):
  // takes the live state from a member, the members' Admit of the same
  // epoch; over a later epoch when the sender dies meanwhile. Before the
  // first step.
  [[nodiscard]] virtual Status Joined() { return Status::Ok(); }
  // The loop resumed from a checkpoint (--resume) and runs `next_step` next.
  // The nodes of a cluster that stopped together may have stopped steps
  // apart (gossip nodes stop after the step each is in when the signal
  // comes; all-reduce nodes agree on a step unless one stopped alone): in
  // lock step they agree on one step as after a re-form
  // (TakeStepsToCatchUp), and under all-reduce take rank 0's state.
  // Collective over the epoch-0 members, so every founding node passes
  // --resume (the coordinator refuses a founding join that differs:
  // LocalNodeInfo::resume); called only in a cluster of two or more at epoch
  // 0 (a node that joins later is synchronised by its admission instead).
  [[nodiscard]] virtual Status Resumed(int64_t /*next_step*/) { return Status::Ok(); }
  // Steps the loop must catch up before its next exchanged step, and then 0
  // again: after a re-form the survivors resume from the largest step any of
  // them reached (step_agreement.h), and a node behind trains the steps it
  // missed on its own (no exchange hooks), so that their batches are trained.
  virtual int64_t TakeStepsToCatchUp() { return 0; }
  // True (once) when the step's exchange abandoned this step in a re-form:
  // every survivor then already holds the new rank 0's weights, momentum and
  // loss scale, and the loop must not apply this step's update. (Survivors
  // may abandon different steps, one finishing the step the other failed;
  // even a zero-gradient update moves the weights by lr(step) through
  // momentum and weight decay, so applying it would make the replicas
  // differ.)
  virtual bool TakeStepAbandoned() { return false; }
  // True when no node's step completes without every member taking part in
  // it (all-reduce): the nodes then stop before one agreed step on a signal
  // (TrainLoop), so their checkpoints agree. Gossip nodes run steps apart.
  virtual bool StepsInLockstep() const { return false; }
  // True when the nodes' steps are not matched at all (asynchronous pairwise
  // gossip): under train.stop = "samples" each node then trains as fast as it
  // can, nothing waits for step numbers to meet, and the membership follows
  // the own-pace mode.
  virtual bool StepsRunApart() const { return false; }
  // Lock step, at an admission point (before step `next_step`): the control
  // plane holds a view without some members of the installed one, and none
  // of this node's operations since involved them (NoLoCo's pairs, an outer
  // step's inner steps). The members whose operations did are re-forming
  // and never reach the admission point's barrier: meet them in the
  // re-form now. Ok without doing anything where every loss fails the next
  // step's operations on every member anyway (the default).
  [[nodiscard]] virtual Status MembersLost(int64_t /*next_step*/) { return Status::Ok(); }
};

}  // namespace chorus::node
