// After a membership change the survivors of a collective or a gossip round
// may stand at different steps (one finished the failed step's exchange, its
// neighbour did not). Every exchange protocol matches messages by round, so
// they must resume from one step: the largest any survivor reached. A node
// behind it trains the missing steps on its own, without the exchange (the
// training loop's CatchUpStep), so their batches are not lost.
// ReformOverSurvivors drives a whole re-form, again at a later epoch when
// another member dies during it.
//
// Must not: be called by only some survivors (it is a collective over the new
// membership), or reuse the tags of an exchange of the same epoch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/cluster/cluster_session.h"
#include "node/cluster/live_state.h"
#include "node/config/config.h"

namespace chorus::node {

// The tags AgreeOnResumeStep uses in membership epoch `epoch`: disjoint from
// the fusion buckets (EpochTagBase(epoch) + b << 20), from the re-form
// broadcast (+ 1 << 39) and from the gossip streams (top bits).
inline gossip::Tag ResumeStepTagBase(uint64_t epoch) {
  return EpochTagBase(epoch) + (gossip::Tag{3} << 38);
}

// Deadline of the collectives that re-form an exchange: a survivor may still
// be stuck in the failed operation for up to fabric.op_timeout_s and learn of
// the new epoch up to cluster.dead_timeout_s after the others.
inline Deadline ReformDeadline(const Config& config) {
  return Deadline::AfterSeconds(2 * config.fabric.op_timeout_s + 2 * config.cluster.dead_timeout_s + 10);
}

// Whether `s` is what an operation returns when a member it needed died, froze
// or left (Unavailable, DeadlineExceeded, Aborted): a failure to re-form after.
bool MemberLost(const Status& s);

// Re-forms an exchange after `failure` (a member died, or the exchange failed
// on its own): waits for the membership epoch after the session's, which a
// death starts; when none came within 2 * cluster.dead_timeout_s, asks for
// one over the same members (ControlPlane::RequestReform) and waits as long
// again and 10 s. Then runs `attempt` at it, which installs the new view and
// resynchronises.
// An attempt fails when another member dies during it (a collective or a
// barrier meets the dead one, or the epoch moves on): then this waits for the
// epoch that drops that member and tries again, as long as errors are those of
// lost members (Unavailable, DeadlineExceeded, Aborted) and at most once per
// member of the failed epoch. `what` names the exchange in the log. Aborted
// when this node was removed from the cluster.
[[nodiscard]] Status ReformOverSurvivors(ClusterSession& session, const Config& config, const Status& failure,
                                         const std::string& what,
                                         const std::function<Status(const MembershipView&)>& attempt);

// An exchange operation (`what`) failed with `failure`: logs it, and with
// exchange.on_failure = "stop" returns it (saying so); otherwise returns
// `reform`'s status (a ReformOverSurvivors).
// --resume of the founding members (MembershipTransitions::Resumed): they agree on the
// largest step any of them resumed at (AgreeOnResumeStep). A member behind
// it (its checkpoint is older: it stopped or died before the others) takes
// the live state of the lowest-ranked member at that step (ShareLiveState),
// so that every member goes on from one model, one step and one data
// position cut from one pool. Without a LiveState (`state` null) it catches
// up on its own instead. Returns the steps this member has still to catch up.
[[nodiscard]] Result<int64_t> CatchUpOnResume(const gossip::Collective& collective, const MembershipView& view,
                                              LiveState* state, int64_t next_step, const Config& config);

[[nodiscard]] Status StopOrReform(const Config& config, const Status& failure, const std::string& what,
                                  const std::function<Status()>& reform);

// The largest `next_step` over the ranks of `collective` (an all-reduce of a
// one-hot vector: exact for steps below 2^24).
[[nodiscard]] Result<int64_t> AgreeOnResumeStep(const gossip::Collective& collective, int64_t next_step,
                                                uint64_t epoch, Deadline deadline);

// How many steps this node is behind the others of `view` (AgreeOnResumeStep
// over its members, each at its `next_step`), logged when it is: the steps it
// trains on its own to resume with them.
[[nodiscard]] Result<int64_t> StepsBehind(const gossip::Collective& collective, const MembershipView& view,
                                          int64_t next_step, const Config& config);

}  // namespace chorus::node
