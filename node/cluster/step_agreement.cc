// Agreeing on the step to resume from after a re-form (see step_agreement.h).
#include "node/cluster/step_agreement.h"

#include <algorithm>
#include <vector>

#include "common/log.h"

namespace chorus::node {

Result<int64_t> AgreeOnResumeStep(const gossip::Collective& collective, int64_t next_step, uint64_t epoch,
                                  Deadline deadline) {
  if (next_step < 0 || next_step >= (int64_t{1} << 24)) {
    return Err(OutOfRange("resume step " + std::to_string(next_step) + " is outside [0, 2^24)"));
  }
  const float mine = static_cast<float>(next_step);
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> steps,
                          GatherFromEveryRank(collective, std::span<const float>(&mine, 1), ResumeStepTagBase(epoch),
                                              deadline));
  return static_cast<int64_t>(*std::max_element(steps.begin(), steps.end()));
}

Result<int64_t> StepsBehind(const gossip::Collective& collective, const MembershipView& view, int64_t next_step,
                            const Config& config) {
  CHORUS_ASSIGN_OR_RETURN(int64_t resume, AgreeOnResumeStep(collective, next_step, view.epoch, ReformDeadline(config)));
  const int64_t behind = resume - next_step;
  if (behind > 0) {
    CHORUS_LOG_WARN(Subsys::kGossip, "training ", behind, " step(s) on its own to resume with the others at step ",
                    resume);
  }
  return behind;
}

Result<int64_t> CatchUpOnResume(const gossip::Collective& collective, const MembershipView& view,
                                LiveState* state, int64_t next_step, const Config& config) {
  if (state == nullptr) return StepsBehind(collective, view, next_step, config);
  CHORUS_ASSIGN_OR_RETURN(const int64_t furthest, AgreeOnResumeStep(collective, next_step, view.epoch,
                                                                    ReformDeadline(config)));
  if (next_step < furthest) {
    CHORUS_LOG_WARN(Subsys::kNode, "resumed ", furthest - next_step, " step(s) behind the others (step ", next_step,
                    ", theirs ", furthest, "): taking the live state of a member at step ", furthest);
    state->NeedState();
  }
  CHORUS_RETURN_IF_ERROR(StatusOf(ShareLiveState(collective, view, *state, next_step, ReformDeadline(config))));
  return int64_t{0};
}

Status StopOrReform(const Config& config, const Status& failure, const std::string& what,
                    const std::function<Status()>& reform) {
  CHORUS_LOG_ERROR(Subsys::kGossip, what, " failed: ", failure.ToString());
  if (config.exchange.on_failure == OnFailure::kStop) {
    return failure.WithContext(what + " failed and exchange.on_failure = \"stop\"");
  }
  return reform();
}

bool MemberLost(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

namespace {

// The view after `epoch`. A death or a leave starts one without being asked;
// when none has come within 2 * cluster.dead_timeout_s (the longest a death
// takes to be declared), no member is gone (the failure was the exchange's
// own: a member's training stalled past fabric.op_timeout_s, a slower
// member's inner phase outlasted it, a message was refused), and this node
// asks for the next epoch over the same members. It asks at once when every
// member answers its heartbeats: then no death is on its way to wait for.
Result<MembershipView> NextEpoch(ClusterSession& session, const Config& config, uint64_t epoch) {
  const double death_s = 2 * config.cluster.dead_timeout_s;
  if (session.control->EveryMemberAnswers(epoch)) {
    CHORUS_LOG_WARN(Subsys::kGossip, "every member answers its heartbeats after the failure: asking for an epoch "
                    "over the same members");
  } else {
    Result<MembershipView> next = session.control->WaitForEpochAbove(epoch, Deadline::AfterSeconds(death_s));
    if (next || next.error().code() != StatusCode::kDeadlineExceeded) return next;
    CHORUS_LOG_WARN(Subsys::kGossip, "no member is gone ", death_s, " s after the failure: asking for an epoch "
                    "over the same members");
  }
  session.control->RequestReform(epoch);
  ++session.reforms_asked;
  return session.control->WaitForEpochAbove(epoch, Deadline::AfterSeconds(death_s + 10));
}

// In lock step, the members of a view asked for over the same members
// (MembershipView::reform) all re-form in it: they meet at a control-plane
// barrier first. A member that does not come by the re-form's deadline
// answers heartbeats (else it would have been declared dead); while its
// heartbeats say it trains (a slower node still in a long inner phase: the
// exchange that failed timed out waiting for it), the others wait on, up to
// kReformWaits deadlines. One whose training stands still hangs: the others
// declare it dead (ControlPlane::DeclareUnresponsive), the next epoch drops
// it, and the attempt there goes on without it. Not at their own pace (each
// node follows a view on its own) nor with joiners (they take the live
// state, not the re-form).
constexpr int kReformWaits = 8;

Status MeetForReform(ClusterSession& session, const Config& config, const MembershipView& next) {
  if (!next.reform || !next.joined.empty() || session.own_pace()) return Status::Ok();
  std::vector<std::string> missing;
  Status met = session.control->BarrierWhileTraining("chorus.re-form", next.epoch, ReformDeadline(config),
                                                     kReformWaits, &missing);
  if (met.code() != StatusCode::kDeadlineExceeded) return met;
  for (const std::string& name : missing) {
    ++session.hung_members_declared;
    session.control->DeclareUnresponsive(
        name, "it answers heartbeats but did not meet the re-form of epoch " + std::to_string(next.epoch) +
                  " by its deadline: its training hangs");
  }
  return met;
}

}  // namespace

Status ReformOverSurvivors(ClusterSession& session, const Config& config, const Status& failure,
                           const std::string& what, const std::function<Status(const MembershipView&)>& attempt) {
  const int attempts = std::max(1, session.view.size());
  uint64_t epoch = session.view.epoch;
  using Recovery = InstalledPeers::Recovery;
  session.installed->SetRecovery(Recovery::kWaiting);  // kTraining again however this returns
  struct Recovered {
    InstalledPeers& installed;
    ~Recovered() { installed.SetRecovery(Recovery::kTraining); }
  } recovered{*session.installed};
  for (int i = 1;; ++i) {
    CHORUS_LOG_WARN(Subsys::kGossip, "waiting for the membership epoch after ", epoch, " to re-form the ", what);
    CHORUS_ASSIGN_OR_RETURN(MembershipView next, NextEpoch(session, config, epoch));
    if (next.self_rank < 0) return Aborted("this node was removed from the cluster");
    session.installed->SetRecovery(Recovery::kReforming);  // a newer epoch now ends the attempt
    Status s = MeetForReform(session, config, next);
    if (s.ok()) s = attempt(next);
    session.installed->SetRecovery(Recovery::kWaiting);
    if (s.ok()) {
      CHORUS_LOG_WARN(Subsys::kGossip, "re-formed the ", what, " over ", next.size(), " survivors at epoch ",
                      next.epoch, " (after: ", failure.message(), ")");
      return s;
    }
    if (!MemberLost(s) || i >= attempts) {
      return s.WithContext("re-forming the " + what + " at epoch " + std::to_string(next.epoch) + " (attempt " +
                           std::to_string(i) + " of at most " + std::to_string(attempts) + ")");
    }
    CHORUS_LOG_WARN(Subsys::kGossip, "re-forming the ", what, " at epoch ", next.epoch,
                    " failed (another member lost?): ", s.ToString());
    epoch = next.epoch;
  }
}

}  // namespace chorus::node
