// The membership protocol of ControlPlane (state in control_plane_impl.h).
//
// Roles. The founder candidate (control_discovery.cc) collects joins until
// cluster.min_nodes nodes are present and fixes epoch 0 (ranks by
// RanksBefore). From then on the coordinator is the lowest-ranked member that
// this node does not consider dead or leaving; every member computes that on
// its own from its view and liveness table.
//
// Restart. A join under the name of a member whose old process is gone (the
// joiner advertises that member's address, or the member's connection to the
// coordinator closed, or it is suspect) declares that member dead at once and
// waits as any joiner; only a live, connected member's name is refused.
//
// Epoch change e -> e+1. The coordinator proposes (epochProposal) when a member
// is dead (silent for dead_timeout_s, or sooner: its connection closed and
// dials to it are refused; see LivenessTable; or another member's heartbeat
// says that member declared it dead) or has sent leave, or at an epoch
// boundary with joiners waiting (AdvanceEpochIfPending). Survivors keep their
// order, joiners follow. Members ack a proposal for an epoch above theirs that
// includes them, if the proposer ranks no higher than the coordinator they
// expect; otherwise they wait, and the proposer re-sends every heartbeat tick
// until their own liveness view agrees. With every ack in, the coordinator
// commits (welcome) to the members, the joiners and the leavers, and installs.
// A newer proposal (a member died meanwhile) replaces an outstanding one; acks
// name the proposal id, so a stale ack is ignored.
//
// Barriers: control_barrier.cc.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "common/enum_names.h"
#include "common/log.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

uint64_t RandomId() {
  const Nonce n = RandomNonce();
  uint64_t id = 0;
  std::memcpy(&id, n.data(), sizeof(id));
  return id;
}

// A view's data salt (ClusterKey::DataKey).
std::vector<uint8_t> RandomSalt() {
  const Nonce n = RandomNonce();
  return std::vector<uint8_t>(n.begin(), n.end());
}

std::vector<std::string> Names(const std::vector<Member>& members) {
  std::vector<std::string> names;
  for (const Member& m : members) names.push_back(m.name);
  return names;
}

}  // namespace

void ControlPlaneImpl::Dispatch(const std::shared_ptr<Connection>& conn, ControlMessage message) {
  const bool reply = std::holds_alternative<msg::State>(message) || std::holds_alternative<msg::Redirect>(message) ||
                     std::holds_alternative<msg::Reject>(message);
  if (reply && probes_.count(conn->id())) {
    HandleProbeReply(conn, message);
    return;
  }
  if (reply && conn == join_conn_) {
    HandleJoinReply(conn, message);
    return;
  }
  if (reply && split_probes_.count(conn->id())) {
    HandleSplitProbeReply(conn, message);
    return;
  }
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, msg::Join>) {
          HandleJoin(conn, m);
        } else if constexpr (std::is_same_v<T, msg::Welcome>) {
          HandleWelcome(conn, m);
        } else if constexpr (std::is_same_v<T, msg::EpochProposal>) {
          HandleProposal(conn, m);
        } else if constexpr (std::is_same_v<T, msg::EpochAck>) {
          HandleAck(m);
        } else if constexpr (std::is_same_v<T, msg::Leave>) {
          HandleLeave(m);
        } else if constexpr (std::is_same_v<T, msg::Barrier>) {
          HandleBarrier(m);
        } else if constexpr (std::is_same_v<T, msg::StateRequest>) {
          HandleStateRequest(conn, m);
        } else if constexpr (std::is_same_v<T, msg::Heartbeat>) {
          HandleHeartbeat(conn, m);
        } else if constexpr (std::is_same_v<T, msg::State>) {
          HandleState(conn, m);
        } else if constexpr (std::is_same_v<T, msg::Reject>) {
          CHORUS_LOG_WARN(Subsys::kControl, conn->Describe(), " rejected a message: ", m.reason);
        } else if constexpr (std::is_same_v<T, msg::Redirect>) {
          // From a fellow member: it found a larger part of a split cluster.
          if (formed_ && phase_ == Phase::kMember && conn->peer_name() != self_.name &&
              view_.Find(conn->peer_name())) {
            YieldToLargerPart(conn->Describe() + " found a larger part of the split cluster", m,
                              /*tell_members=*/false);
          }
        }
      },
      message);
}

// ---------------------------------------------------------------------------
// The coordinator, the outbox, a restarted member

bool ControlPlaneImpl::IsCoordinator() const {
  if (!formed_) return founder_ && phase_ == Phase::kWaiting;
  return phase_ == Phase::kMember && ExpectedCoordinator() == self_.name;
}

std::string ControlPlaneImpl::ExpectedCoordinator() const {
  for (const Member& m : view_.members) {
    if (m.name == self_.name) {
      if (phase_ == Phase::kMember) return m.name;
    } else if (!Gone(m.name)) {
      return m.name;
    }
  }
  return std::string();
}

bool ControlPlaneImpl::OutboxDelivered() const {
  for (const auto& [name, messages] : outbox_) {
    if (!messages.empty() && !dead_.count(name)) return false;
  }
  return true;
}

void ControlPlaneImpl::DialForOutbox() {
  for (const Member& m : view_.members) {
    if (m.name != self_.name && LeaveOwedTo(m.name) && !peers_.count(m.name)) {
      DialMember(m);
    }
  }
}

bool ControlPlaneImpl::OthersAllGone() const {
  for (const Member& m : view_.members) {
    if (m.name != self_.name && !Gone(m.name)) return false;
  }
  return true;
}

bool ControlPlaneImpl::RestartsMember(const std::shared_ptr<Connection>& conn, const Member& info) {
  const Member* m = view_.Find(info.name);
  auto peer = peers_.find(info.name);
  // Our only connection under that name is the joiner's own: the member's is gone.
  const bool unconnected = peer == peers_.end() || peer->second == conn;
  std::string why;
  if (m->control_address == info.control_address) {
    why = "a new process listens at its address " + info.control_address + " and asks to join";
  } else if (unconnected || liveness_.IsLost(info.name)) {
    why = "its control connection is closed and a new process with its name (" + info.control_address +
          ") asks to join";
  } else if (liveness_.IsSuspect(info.name)) {
    why = "it is suspect and a new process with its name (" + info.control_address + ") asks to join";
  } else {
    return false;
  }
  if (peer != peers_.end() && peer->second == conn) peers_.erase(peer);  // the joiner's, not the member's
  DeclareDead(info.name, m->rank, why, /*gone=*/false);
  dead_for_sure_.insert(info.name);  // a new process holds its name: the old one counts as gone
  return true;
}

void ControlPlaneImpl::DeclareDead(const std::string& name, int rank, const std::string& why, bool gone) {
  CHORUS_LOG_WARN(Subsys::kControl, "member ", name, " (rank ", rank, ") is dead: ", why);
  dead_.insert(name);
  if (gone) dead_for_sure_.insert(name);
  if (!left_.count(name)) to_report_failures_.push_back({name, rank, MemberFailure::Kind::kDeclaredDead, gone});
  auto peer = peers_.find(name);
  if (peer != peers_.end()) {
    peer->second->Close(Unavailable("member " + name + " declared dead"));
    peers_.erase(peer);
  }
  outbox_.erase(name);
  cv_.notify_all();
  AckDeferredProposal();
}

// ---------------------------------------------------------------------------
// Epochs

void ControlPlaneImpl::MaybeFormEpoch0() {
  if (!founder_ || formed_ || phase_ != Phase::kWaiting) return;
  std::vector<Member> candidates{self_};
  for (const Applicant& a : applicants_) {
    if (a.conn->established()) candidates.push_back(a.info);
  }
  if (static_cast<int>(candidates.size()) < config_.min_nodes) return;
  // Alone, a node that reached none of the nodes its bootstrap list names
  // cannot tell a cluster still starting from one it failed to reach.
  if (candidates.size() == 1 && bootstrap_names_others_ && !contacted_) return;
  // A node it has heard of but not probed yet may be lower (it probed us
  // first) or formed: with cluster.min_nodes at most half the nodes, fixing
  // epoch 0 before its answer could found a second cluster beside it.
  for (const auto& [address, k] : known_) {
    if (k.reach == Known::Reach::kUntried && !k.self) return;
  }
  msg::EpochView v;
  v.epoch = 0;
  v.proposal_id = RandomId();
  v.data_salt = RandomSalt();
  v.run_salt = RandomSalt();
  v.proposer = self_.name;
  v.members = AssignInitialRanks(std::move(candidates));
  AdoptRun(v);  // what this view carries is signed in its run
  v.expelled = ExpelledForViews();
  for (const Applicant& a : applicants_) {
    if (a.conn->established()) a.conn->Send(msg::Welcome{v});
  }
  InstallView(v);
}

void ControlPlaneImpl::MaybePropose() {
  if (phase_ != Phase::kMember || !formed_ || ExpectedCoordinator() != self_.name) return;
  std::vector<Member> survivors;
  std::vector<int> departed;
  std::vector<std::string> finished, stopped;
  for (const Member& m : view_.members) {
    if (m.name == self_.name || !Gone(m.name)) {
      survivors.push_back(m);
    } else {
      departed.push_back(m.rank);
      auto left = left_.find(m.name);
      if (left != left_.end() && !dead_.count(m.name)) (left->second ? stopped : finished).push_back(m.name);
    }
  }
  const bool admits = advance_requested_ || AdmitsOnItsOwnNow(!departed.empty());
  if (departed.empty() && !admits && !reform_requested_) return;
  if (InMinorityPart(survivors.size())) {
    LeaveAsCutOff(survivors.size());
    return;
  }
  std::vector<Member> joiners;
  if (admits) {
    for (const Applicant& a : applicants_) {
      if (a.conn->established()) joiners.push_back(a.info);
    }
  }
  const size_t num_survivors = survivors.size();
  std::vector<Member> members = AssignNextRanks(std::move(survivors), std::move(joiners));
  if (proposal_ && Names(proposal_->view.members) == Names(members)) return;  // already proposed

  msg::EpochView v;
  v.epoch = view_.epoch + 1;
  v.proposal_id = RandomId();
  v.data_salt = RandomSalt();
  v.run_salt = run_salt_;
  v.proposer = self_.name;
  v.departed = departed;
  v.finished = finished;
  v.stopped = stopped;
  v.expelled = ExpelledForViews();
  v.reform = reform_requested_;
  for (size_t i = num_survivors; i < members.size(); ++i) v.joined.push_back(members[i].name);
  v.members = std::move(members);
  proposal_ = Proposal{v, {}};
  for (const Member& m : v.members) {
    if (m.name != self_.name) proposal_->waiting.insert(m.name);
  }
  MembershipView preview{v.epoch, -1, v.members, v.departed, v.joined, {}, {}};
  CHORUS_LOG_INFO(Subsys::kControl, "proposing ", preview.Describe());
  if (proposal_->waiting.empty()) {
    Commit();
  } else {
    SendProposal();
  }
}

void ControlPlaneImpl::SendProposal() {
  if (!proposal_) return;
  const msg::EpochProposal p{proposal_->view};
  for (const std::string& name : proposal_->waiting) SendTo(name, p, false);
}

void ControlPlaneImpl::HandleProposal(const std::shared_ptr<Connection>& conn, const msg::EpochProposal& p) {
  const msg::EpochView& v = p.view;
  if (conn->peer_name() != v.proposer) return;
  bool includes_self = false;
  for (const Member& m : v.members) includes_self |= m.name == self_.name;
  if (phase_ == Phase::kWaiting && formed_ == false) {
    // A joiner being admitted: its coordinator asks it to confirm it is alive.
    if (includes_self) conn->Send(msg::EpochAck{v.epoch, v.proposal_id, self_.name});
    return;
  }
  // A leaving node stays silent: its leave makes the proposer propose without it.
  if (phase_ != Phase::kMember || v.epoch <= view_.epoch) return;
  const Member* proposer = view_.Find(v.proposer);
  const Member* expected = view_.Find(ExpectedCoordinator());
  if (!proposer) return;
  if (expected && proposer->rank > expected->rank) {
    CHORUS_LOG_DEBUG(Subsys::kControl, "not yet acking epoch ", v.epoch, " from ", v.proposer, ": ",
                     expected->name, " is still alive here");
    deferred_proposal_ = DeferredProposal{conn, p};
    return;
  }
  if (proposal_ && v.proposer != self_.name) {
    CHORUS_LOG_INFO(Subsys::kControl, "dropping our proposal of epoch ", proposal_->view.epoch, ": ",
                    v.proposer, " ranks lower and proposes");
    proposal_.reset();
  }
  if (!includes_self) {
    CHORUS_LOG_WARN(Subsys::kControl, v.proposer, " proposes epoch ", v.epoch, " without this node");
    return;
  }
  conn->Send(msg::EpochAck{v.epoch, v.proposal_id, self_.name});
}

void ControlPlaneImpl::AckDeferredProposal() {
  if (!deferred_proposal_) return;
  const DeferredProposal deferred = std::move(*deferred_proposal_);
  deferred_proposal_.reset();
  const std::shared_ptr<Connection> conn = deferred.conn.lock();
  if (conn && conn->established()) HandleProposal(conn, deferred.proposal);  // defers it again if still early
}

void ControlPlaneImpl::HandleAck(const msg::EpochAck& ack) {
  if (!proposal_ || ack.proposal_id != proposal_->view.proposal_id) return;
  proposal_->waiting.erase(ack.sender);
  if (proposal_->waiting.empty()) Commit();
}

void ControlPlaneImpl::Commit() {
  const msg::EpochView v = proposal_->view;
  proposal_.reset();
  const msg::Welcome welcome{v};
  for (const Member& m : v.members) {
    if (m.name != self_.name) SendTo(m.name, welcome, true);
  }
  // Leavers still connected learn that the cluster moved on without them.
  for (const auto& [name, stopping] : left_) {
    bool member = false;
    for (const Member& m : v.members) member |= m.name == name;
    auto peer = peers_.find(name);
    if (!member && peer != peers_.end()) peer->second->Send(welcome);
  }
  InstallView(v);
}

void ControlPlaneImpl::HandleWelcome(const std::shared_ptr<Connection>& conn, const msg::Welcome& w) {
  const msg::EpochView& v = w.view;
  if (Terminal() || conn->peer_name() != v.proposer) return;
  if (formed_ && v.epoch <= view_.epoch) return;
  if (!formed_) {
    if (phase_ != Phase::kWaiting && phase_ != Phase::kJoining) return;
    // Our first view: the link to the coordinator becomes a member connection.
    if (conn == join_conn_) join_conn_.reset();
    for (const Member& m : v.members) {
      if (m.name == conn->peer_name()) RegisterPeer(m.name, conn);
    }
  }
  InstallView(v);
}

void ControlPlaneImpl::InstallView(const msg::EpochView& v) {
  ReportDroppedMembers(v);
  NoteDeparted(v);
  AdoptView(v);
  if (view_.self_rank < 0) return LeaveAsRemoved(v);
  self_.rank = view_.self_rank;
  if (phase_ != Phase::kLeaving) phase_ = Phase::kMember;
  AdoptRun(v);
  LearnExpulsions(v.expelled, v.proposer);
  death_reports_.clear();
  ForgetNonMembers();
  RegisterKnownMembers();
  DropOldBarriers();
  if (on_member_) std::exchange(on_member_, nullptr)();
  CHORUS_LOG_INFO(Subsys::kControl, view_.Describe());
  to_announce_.push_back(view_);
  cv_.notify_all();
  DialMissing();
}

// A member the view drops that did not leave has died, whether or not this
// node declared it dead itself before the others' commit arrived. The view
// says which left (its Leave may come after it): one that finished its run is
// no failure (taking it for dead would end operations still completing), one
// that stopped is.
void ControlPlaneImpl::ReportDroppedMembers(const msg::EpochView& v) {
  if (!formed_) return;
  auto names = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const Member& m : view_.members) {
    const bool kept = std::any_of(v.members.begin(), v.members.end(), [&](const Member& n) { return n.name == m.name; });
    if (kept || names(v.finished, m.name) || m.name == self_.name || left_.count(m.name) || dead_.count(m.name)) {
      continue;
    }
    const bool stopped = names(v.stopped, m.name);
    to_report_failures_.push_back(
        {m.name, m.rank, stopped ? MemberFailure::Kind::kStopped : MemberFailure::Kind::kDeclaredDead, stopped});
  }
}

void ControlPlaneImpl::AdoptView(const msg::EpochView& v) {
  MembershipView next;
  next.epoch = v.epoch;
  next.members = v.members;
  next.departed = v.departed;
  next.joined = v.joined;
  next.data_salt = v.data_salt;
  next.data_key = key_->DataKey(v.epoch, v.data_salt);
  next.reform = v.reform;
  for (const Member& m : v.members) {
    if (m.name == self_.name) next.self_rank = m.rank;
  }
  view_ = std::move(next);
  formed_ = true;
  proposal_.reset();
  advance_requested_ = false;
  reform_requested_ = false;
}

void ControlPlaneImpl::EndRemoved(uint64_t epoch, const std::string& how) {
  EndAs(Phase::kRemoved, Aborted(self_.name + " was removed from the cluster at epoch " +
                                 std::to_string(epoch) + how));
  CHORUS_LOG_ERROR(Subsys::kControl, failure_.message());
}

// A view without this node: it left (Leave), or the others removed it.
void ControlPlaneImpl::LeaveAsRemoved(const msg::EpochView& v) {
  if (phase_ == Phase::kLeaving) {
    phase_ = Phase::kLeft;
    CHORUS_LOG_INFO(Subsys::kControl, self_.name, " has left; the cluster goes on with ", view_.Describe());
  } else {
    EndRemoved(v.epoch, " by " + v.proposer);
  }
  to_announce_.push_back(view_);  // self_rank -1: this node is out
  CloseAll();
  cv_.notify_all();
}

// Liveness, connections and queued messages of nodes the view does not hold.
void ControlPlaneImpl::ForgetNonMembers() {
  dead_.clear();
  dead_for_sure_.clear();
  for (auto it = left_.begin(); it != left_.end();) {
    it = view_.Find(it->first) ? std::next(it) : left_.erase(it);
  }
  std::vector<std::string> others;
  for (const Member& m : view_.members) {
    if (m.name != self_.name) others.push_back(m.name);
  }
  liveness_.Reset(others, Clock::now());
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (view_.Find(it->first)) {
      ++it;
    } else {
      it->second->CloseAfterFlush(Status::Ok());
      it = peers_.erase(it);
    }
  }
  for (auto it = outbox_.begin(); it != outbox_.end();) {
    it = view_.Find(it->first) ? std::next(it) : outbox_.erase(it);
  }
}

// Applicants the view admitted, and members that connected to us before we
// knew they were members, become member connections. A connection that
// carried no member's message yet (a probe, a join) does not: it may be a
// probe about to close, whose close would look like the member's death.
void ControlPlaneImpl::RegisterKnownMembers() {
  for (auto it = applicants_.begin(); it != applicants_.end();) {
    if (view_.Find(it->info.name)) {
      RegisterPeer(it->info.name, it->conn);
      it = applicants_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& conn : conns_) {
    const std::string& name = conn->peer_name();
    if (conn->established() && name != self_.name && view_.Find(name) && !peers_.count(name) &&
        (member_conns_.count(conn->id()) || dialed_member_.count(conn->id()))) {
      RegisterPeer(name, conn);
    }
  }
}

void ControlPlaneImpl::HandleLeave(const msg::Leave& leave) {
  if (leave.name == self_.name) return;
  if (!formed_) {
    // A member that formed epoch 0 before us may leave before our copy of the
    // view arrives; InstallView keeps the mark if it is a member. Dropping it
    // left this node waiting for that member until the dead timeout.
    CHORUS_LOG_INFO(Subsys::kControl, leave.name, " leaves the cluster before this node installed epoch ",
                    leave.epoch);
    left_.emplace(leave.name, leave.stopping);
    return;
  }
  const Member* member = view_.Find(leave.name);
  if (member == nullptr) return;
  if (left_.emplace(leave.name, leave.stopping).second) {
    CHORUS_LOG_INFO(Subsys::kControl, "member ", leave.name, " (rank ", member->rank, ") leaves the cluster",
                    leave.stopping ? " before the end of its run" : "");
    if (leave.stopping && !dead_.count(leave.name)) {
      to_report_failures_.push_back({leave.name, member->rank, MemberFailure::Kind::kStopped, /*gone=*/true});
    }
    cv_.notify_all();
    MaybePropose();
    AckDeferredProposal();
  }
}

// ---------------------------------------------------------------------------
// Heartbeats and liveness

void ControlPlaneImpl::HandleHeartbeat(const std::shared_ptr<Connection>& conn, const msg::Heartbeat& h) {
  // A heartbeat from a node that is not (or no longer) a member here: it may
  // have missed the epoch that removed it. Our state tells it where it stands.
  if (!formed_ || (phase_ != Phase::kMember && phase_ != Phase::kLeaving)) return;
  if (view_.Find(h.sender) && !Gone(h.sender)) {
    samples_.Merge(h.counts);
    if (!h.incarnation.empty()) samples_.Raise(h.incarnation, h.samples);
    // A member's word (accusations, dead reports) counts only over its own
    // authenticated connection: never relayed, so it counts once.
    const bool own_word = h.sender == conn->peer_name();
    if (own_word) LearnAccusations(h.accusations, h.sender);
    SamplesHeard& heard = samples_heard_[h.sender];
    const Clock::time_point now = Clock::now();
    if (heard.incarnation != h.incarnation) heard = SamplesHeard{h.incarnation, 0, now, 0.0};  // restarted
    if (h.samples > heard.samples) {
      const double dt = std::chrono::duration<double>(now - heard.at).count();
      heard.per_second = heard.samples > 0 && dt > 0 ? static_cast<double>(h.samples - heard.samples) / dt : 0.0;
      heard.samples = h.samples;
      heard.at = now;
    }
    // A member that declared others dead has ended this epoch's operations
    // with them, so the epoch cannot go on with both: the coordinator drops
    // one side (JudgeDeathReports), though it may hear both (it was frozen,
    // and judges them afresh; or only that member's link to them failed).
    // Else the members wait for an epoch the coordinator never proposes.
    if (h.epoch == view_.epoch && IsCoordinator() && own_word) {
      for (const std::string& name : h.dead) NoteDeathReport(name, h.sender, now);
      JudgeDeaths(now);
      NoteReformRequest(h);
    }
  }
  if (h.sender != self_.name && (!view_.Find(h.sender) || Gone(h.sender)) && h.epoch <= view_.epoch) {
    conn->Send(BuildState());
  }
}

void ControlPlaneImpl::HandleState(const std::shared_ptr<Connection>& conn, const msg::State& s) {
  // Only a member's committed view that is newer than ours matters here.
  if (!formed_ || phase_ != Phase::kMember || !s.formed || s.epoch <= view_.epoch) return;
  if (!view_.Find(conn->peer_name())) return;
  auto theirs = [&](const std::string& name) {
    return std::any_of(s.members.begin(), s.members.end(), [&](const Member& m) { return m.name == name; });
  };
  if (!theirs(self_.name)) {
    // Fewer members than ours that answer and are not in it: not the others'
    // verdict but the part that was cut off, whose coordinator declared
    // everyone else dead first. Ours goes on without its members, and its
    // split probe finds ours larger and yields. A node whose control thread
    // stalled lately cannot tell (the others' silence was its own), and
    // takes the verdict.
    const Clock::time_point now = Clock::now();
    size_t ours = 0;
    for (const Member& m : view_.members) {
      if (theirs(m.name)) continue;
      if (m.name == self_.name || Answers(m.name)) {
        ++ours;
      }
    }
    if (now - stalled_at_ > dead_after_ && ours > s.members.size()) {
      for (const Member& m : s.members) {
        const Member* member = view_.Find(m.name);
        if (member == nullptr || Gone(m.name)) continue;
        DeclareDead(m.name, member->rank,
                    "its part of the cluster holds " + std::to_string(s.members.size()) + " member(s) at epoch " +
                        std::to_string(s.epoch) + " (learned from " + conn->Describe() + "), ours " +
                        std::to_string(ours) + " that still answer",
                    /*gone=*/false);
      }
      MaybePropose();
      return;
    }
    EndRemoved(s.epoch, " (learned from " + conn->Describe() + ")");
    view_ = MembershipView{s.epoch, -1, s.members, {}, {}, {}, {}};
    to_announce_.push_back(view_);
    CloseAll();
    cv_.notify_all();
    return;
  }
  // We missed a commit: catch up with the member's view.
  msg::EpochView v;
  v.epoch = s.epoch;
  v.proposer = conn->peer_name();
  v.members = s.members;
  v.data_salt = s.data_salt;
  v.run_salt = run_salt_;
  v.reform = s.reform;
  for (const Member& m : view_.members) {
    bool kept = false;
    for (const Member& n : s.members) kept |= n.name == m.name;
    if (!kept) v.departed.push_back(m.rank);
  }
  for (const Member& n : s.members) {
    if (!view_.Find(n.name)) v.joined.push_back(n.name);
  }
  CHORUS_LOG_WARN(Subsys::kControl, "catching up from epoch ", view_.epoch, " to epoch ", s.epoch, " (from ",
                  conn->Describe(), ")");
  InstallView(v);
}

void ControlPlaneImpl::OnTick() {
  const Clock::time_point now = Clock::now();
  const Duration since_last_tick = now - last_tick_;
  const bool stalled = StalledSinceLastTick(now);
  last_tick_ = now;
  if (phase_ != Phase::kMember && phase_ != Phase::kLeaving) return;
  SendHeartbeat();
  if (stalled) {
    // This node did not run for a while (suspended, starved): the others'
    // silence is ours. Judge them again from now on.
    CHORUS_LOG_WARN(Subsys::kControl, "the control thread stalled for ",
                    std::chrono::duration<double>(since_last_tick).count(),
                    " s: not counting that time against the other members");
    liveness_.HeardAll(now);
    stalled_at_ = now;
  }
  CheckLiveness(now);
  if (IsCoordinator()) JudgeDeaths(now);
  ProbeDeparted(now);
  DialMissing();
  SendProposal();
  MaybePropose();
  ResendBarriers();
}

void ControlPlaneImpl::CheckLiveness(Clock::time_point now) {
  for (const LivenessTable::Event& e : liveness_.Check(now)) {
    const Member* m = view_.Find(e.name);
    const int rank = m ? m->rank : -1;
    const std::string silent = SecondsText(e.silent_s);
    switch (e.change) {
      case LivenessTable::Change::kSuspect:
        CHORUS_LOG_WARN(Subsys::kControl, "member ", e.name, " (rank ", rank, ") is suspect: silent for ",
                        silent, " s");
        break;
      case LivenessTable::Change::kRecovered:
        CHORUS_LOG_INFO(Subsys::kControl, "member ", e.name, " (rank ", rank, ") answers again");
        break;
      case LivenessTable::Change::kDead: {
        const std::string why = e.refused_dials > 0 ? "its control connection closed and " +
                                                             std::to_string(e.refused_dials) +
                                                             " dials in a row were refused (silent for " + silent +
                                                             " s)"
                                                       : "silent for " + std::string(silent) + " s";
        DeclareDead(e.name, rank, why, e.refused_dials > 0);
        break;
      }
    }
  }
}

void ControlPlaneImpl::DialMissing() {
  if (!formed_ || view_.self_rank < 0) return;
  // One connection per pair: the higher rank dials the lower. A member that
  // has gone quiet is dialed from both sides: if it thinks we are dead (it
  // removed us), its answer to our heartbeat tells us so. So is one whose
  // connection closed: refused dials tell that its process is gone.
  for (const Member& m : view_.members) {
    if (m.name == self_.name || peers_.count(m.name) || Gone(m.name)) continue;
    if (m.rank < view_.self_rank || liveness_.IsSuspect(m.name) || liveness_.IsLost(m.name)) DialMember(m);
  }
}

}  // namespace chorus::node
