// Internal state of ControlPlane, shared by control_plane.cc (start-up,
// public API, connections), control_discovery.cc (forming: probes, the founder
// candidate, joining) and control_membership.cc (epoch 0, liveness, proposals,
// barriers, leaving). Not for use outside those files.
//
// Locking: every member below the mutex is guarded by mu_. Asio handlers run on
// the control thread and take mu_ through Locked(); public methods take it on
// the caller's thread and only post work to the control thread. Connections are
// only touched on the control thread. View callbacks run on the control thread
// with mu_ released.
#pragma once

#include <atomic>
#include <compare>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "node/config/config.h"
#include "node/control/control_auth.h"
#include "node/control/control_connection.h"
#include "node/control/control_messages.h"
#include "node/control/membership.h"
#include "node/control/sample_counter.h"

namespace chorus::node {

// The longest a single control-plane dial (to a member, a probed or a joined
// address) may take.
constexpr auto kMaxControlDialTime = std::chrono::seconds(2);

class ControlPlaneImpl : public Connection::Listener {
 public:
  ControlPlaneImpl(const ClusterConfig& config, Member self, VersionInfo versions,
                   std::shared_ptr<const NodeCredentials> credentials);
  ~ControlPlaneImpl() override;

  // ---- start-up (caller's thread, before the public object exists) ----
  // Binds cluster.listen, or serves `listen_fd` when it is >= 0 (its port
  // must agree with cluster.listen's unless that says 0).
  [[nodiscard]] Status Listen(int listen_fd);
  // Before StartThread: see LocalNodeInfo::shared_settings and ::resume.
  void set_join_terms(std::string settings, bool resume) {
    shared_settings_ = std::move(settings);
    resume_ = resume;
  }
  void set_on_member(std::function<void()> on_member) { on_member_ = std::move(on_member); }
  // Takes `fd` over (closing it on failure); checks it listens on TCP/IP.
  [[nodiscard]] Status AdoptListener(int fd, uint16_t expected_port);
  void StartThread();
  [[nodiscard]] Status SelfCheck();
  void Begin();

  // ---- public API (any thread) ----
  uint16_t port() const { return port_; }
  const std::string& advertise_address() const { return advertise_; }
  const std::string& name() const { return self_.name; }
  Result<MembershipView> WaitForEpoch0(Deadline deadline);
  MembershipView View() const;
  uint64_t Epoch() const;
  bool Removed() const;
  std::string ExpelledSelf() const;
  std::vector<std::string> RejoinAddresses() const;
  Status Failure() const;
  void OnViewChange(std::function<void(const MembershipView&)> callback);
  void OnMemberFailure(std::function<void(const MemberFailure&)> callback);
  Result<MembershipView> WaitForEpochAbove(uint64_t epoch, Deadline deadline);
  // ControlPlane::BarrierWhileTraining; `windows` 1 is ControlPlane::Barrier.
  Status BarrierWhileTraining(const std::string& name, uint64_t epoch, Deadline deadline, int windows,
                              std::vector<std::string>* missing);
  Result<MembershipView> AdvanceEpochIfPending(Deadline deadline, int64_t proposal, int64_t* agreed);
  std::vector<std::string> PendingJoiners() const;
  Status Leave(Deadline deadline, LeaveKind kind);
  void ReportProgress(int64_t step, int64_t next_admission_step);
  void ReportSamples(uint64_t samples);
  uint64_t ClusterSamples(bool extrapolate) const;
  std::map<std::string, uint64_t> SampleCounts() const;
  void MergeSampleCounts(const std::map<std::string, uint64_t>& counts);
  void AdmitOnItsOwn(uint64_t until_samples);
  void Expel(const std::string& name, const std::string& why);
  void RequestReform(uint64_t epoch);
  bool EveryMemberAnswers(uint64_t epoch) const;
  void DeclareUnresponsive(const std::string& name, const std::string& why);
  std::shared_ptr<const NodeCredentials> credentials() const { return credentials_; }

  // ---- Connection::Listener (control thread) ----
  void OnEstablished(const std::shared_ptr<Connection>& conn) override;
  void OnMessage(const std::shared_ptr<Connection>& conn, ControlMessage message) override;
  void OnClosed(const std::shared_ptr<Connection>& conn, const Status& reason) override;

 private:
  enum class Phase {
    kStarting,  // listening, self-check running
    kJoining,   // probing known addresses, looking for a node that accepts our join
    kWaiting,   // accepted (or the founder candidate): waiting for epoch 0 or for admission
    kMember,
    kLeaving,   // Leave() called, waiting for the others to move on
    kLeft,
    kRemoved,   // the others installed an epoch without us
    kFailed,    // joining failed
  };
  static std::string_view PhaseName(Phase phase);
  bool Terminal() const {
    return phase_ == Phase::kLeft || phase_ == Phase::kRemoved || phase_ == Phase::kFailed;
  }

  struct Applicant {
    Member info;
    std::shared_ptr<Connection> conn;
  };
  struct Proposal {
    msg::EpochView view;
    std::set<std::string> waiting;  // names whose ack is missing
  };
  struct BarrierKey {
    uint64_t epoch = 0;
    std::string name;
    uint64_t seq = 0;
    auto operator<=>(const BarrierKey&) const = default;
  };
  struct BarrierState {
    std::set<std::string> arrived;
    bool advance = false;     // some arrival carried advance
    bool mine = false;        // this node arrived
    bool my_advance = false;  // the advance flag of our arrival
    bool done = false;        // this node saw everyone arrive
    int64_t value = std::numeric_limits<int64_t>::min();  // the largest value of the arrivals
    int64_t my_value = 0;                                  // the value of our arrival
  };

  // Runs `f` with mu_ held on the control thread, then the view callbacks.
  template <typename F>
  void Locked(F&& f) {
    std::unique_lock<std::mutex> lock(mu_);
    f();
    std::vector<MembershipView> views = std::move(to_announce_);
    to_announce_.clear();
    auto callbacks = callbacks_;
    std::vector<MemberFailure> failures = std::move(to_report_failures_);
    to_report_failures_.clear();
    auto failure_callbacks = failure_callbacks_;
    lock.unlock();
    for (const MembershipView& v : views) {
      for (const auto& cb : callbacks) cb(v);
    }
    for (const MemberFailure& f : failures) {
      for (const auto& cb : failure_callbacks) cb(f);
    }
  }
  // Waits on cv_ until `done()` or the deadline (never overflowing the clock).
  template <typename P>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, Deadline deadline, P done) {
    while (!done()) {
      if (deadline.Expired()) return false;
      cv_.wait_for(lock, std::min<Duration>(deadline.Remaining(), std::chrono::seconds(1)));
    }
    return true;
  }

  // control_plane.cc: connections (mu_ held).
  void StartAccept();
  void StartTick();
  void OnTick();
  void Fail(const Status& status, LogLevel level = LogLevel::kError);
  // Enters kRemoved or kFailed for `why` (failure_, and the flag Failure reads).
  void EndAs(Phase phase, Status why);
  // The others' view at `epoch` leaves this node out (`how`: by whom, or
  // from whom it learned it): the training loop stops at its next step.
  void EndRemoved(uint64_t epoch, const std::string& how);
  // A join or discovery probe that reached this node after its run ended (a
  // Reject with kRunEnded; the joiner exits without a model).
  void RefuseAfterTheRun(const std::shared_ptr<Connection>& conn, const std::string& joiner);
  void CloseAll();
  void DialMember(const Member& member);
  // Dials `name` again after kRedialAfterRefusal while its connection stays
  // lost: its refusals decide its death sooner than the ticks would.
  void RedialSoon(const std::string& name);
  // CheckLiveness between ticks, and the proposal that follows a death; not
  // while this thread's ticks are overdue.
  void JudgeRefusals();
  // HandleProposal again for deferred_proposal_, once a member left or died.
  void AckDeferredProposal();
  // The control thread did not run for longer than a member may stay silent
  // (suspended, starved) since its last tick: the others' silence is ours.
  bool StalledSinceLastTick(Clock::time_point now) const { return now - last_tick_ > suspect_after_; }
  // A connection over a socket this node dialed, kept in conns_ and started
  // (the handshake runs; OnEstablished follows).
  std::shared_ptr<Connection> StartDialed(asio::ip::tcp::socket socket);
  void RegisterPeer(const std::string& name, const std::shared_ptr<Connection>& conn);
  // Sends to a member or applicant by name; when not connected, queues the
  // message for the next connection to that name if `queue` is set.
  void SendTo(const std::string& name, const ControlMessage& message, bool queue);
  msg::State BuildState() const;

  // control_split.cc: a cluster that split in two (a partition, each side
  // declaring the other dead) finds out when the sides can talk again, and
  // the smaller part yields (mu_ held).
  void NoteDeparted(const msg::EpochView& next);
  // Barrier-free admission: established applicants wait, no member departs
  // in the same proposal, and the run is not about to end.
  bool AdmitsOnItsOwnNow(bool departures) const;
  uint64_t ClusterSamplesLocked(bool extrapolate, double horizon_s) const;
  // A member of the view other than this node, not gone: whose heard rate counts.
  bool LiveOtherMember(const std::string& name) const {
    return name != self_.name && !Gone(name) && view_.Find(name) != nullptr;
  }
  void ProbeDeparted(Clock::time_point now);
  void HandleSplitProbeReply(const std::shared_ptr<Connection>& conn, const ControlMessage& message);
  // This node leaves its part for the larger one (`why`), telling its fellow
  // members to do the same (a Redirect from a member) when `tell_members`.
  void YieldToLargerPart(const std::string& why, const msg::Redirect& target, bool tell_members);

  // control_discovery.cc: forming and joining (mu_ held).
  // What a probe of one control address found.
  struct Known {
    enum class Reach { kUntried, kAnswered, kFailed };
    Reach reach = Reach::kUntried;
    bool probing = false;
    bool self = false;    // it answered as this node (another spelling of our address)
    std::string name;     // kAnswered: the node's name
    msg::State state;     // kAnswered: its answer
    std::string error;    // kFailed: why
    // Its advertised address (the key may be another spelling of it).
    const std::string& Address(const std::string& key) const {
      return reach == Reach::kAnswered && !state.address.empty() ? state.address : key;
    }
  };
  void BeginForming();
  bool Forming() const {
    return !formed_ && (phase_ == Phase::kJoining || phase_ == Phase::kWaiting);
  }
  // Adds `address` to the known set and probes it when new; `alive`: it
  // reached us just now (probed or joined us), so a failed one is probed again.
  void Learn(const std::string& address, bool alive);
  void StartProbeTimer();
  void ProbeRound();
  void Probe(const std::string& address);
  void OnProbeEstablished(const std::shared_ptr<Connection>& conn);
  void HandleProbeReply(const std::shared_ptr<Connection>& conn, const ControlMessage& message);
  void OnProbeClosed(const std::shared_ptr<Connection>& conn, const Status& reason);
  void HandleStateRequest(const std::shared_ptr<Connection>& conn, const msg::StateRequest& request);
  // The refusal of a node whose join terms differ from ours ("" if none).
  std::string JoinTermsRefusal(const std::string& name, const std::string& settings, bool resume) const;
  std::vector<std::string> KnownAddresses() const;
  // The lowest advertised address among this node and the unformed nodes that
  // answered; the lowest answering node of a formed cluster ("" if none).
  std::string LowestUnformed() const;
  std::string FormedClusterNode() const;
  std::string NameAt(const std::string& address) const;
  // Decides this node's role from what it knows: join a formed cluster, be
  // the founder candidate, or join the lowest address.
  void Reconsider();
  void BecomeCandidate();
  void StepDown(const std::string& target, bool formed, const std::string& why);
  void TellApplicants();
  void JoinThrough(const std::string& address);
  void DialJoin(const std::string& address);
  // A join through `address` failed; `unreachable`: the address itself (not
  // its answer) failed. Retries after join_retry_delay_.
  void JoinFailed(const std::string& address, const std::string& why, bool unreachable);
  // The cluster ended its run before admitting this node (a Reject with
  // kRunEnded): nothing is left to train, and forming a cluster of its own
  // would train a replica nobody asked for. WaitForEpoch0 returns kCancelled.
  void EndBeforeAdmission(const std::string& why);
  void OnJoinConnectionClosed(const std::shared_ptr<Connection>& conn, const Status& reason);
  void HandleJoinReply(const std::shared_ptr<Connection>& conn, ControlMessage& message);
  void LogAccepted(const msg::State& state);
  // A join that reached this node: accepted here (founder candidate or
  // coordinator), redirected, or refused.
  void HandleJoin(const std::shared_ptr<Connection>& conn, const msg::Join& join);
  // A join that reached a node that does not accept joins while forming.
  void AnswerJoinElsewhere(const std::shared_ptr<Connection>& conn, const msg::Join& join);
  // True when forming has failed for good (and Fail was called).
  bool CheckFormingDeadline(Clock::time_point now);
  void MaybeLogWaiting(Clock::time_point now);
  // Where forming stands: the role, whom it waits for, what it reached.
  std::string FormingReport() const;

  // control_membership.cc: membership (mu_ held).
  void Dispatch(const std::shared_ptr<Connection>& conn, ControlMessage message);
  // A join whose name is a current member's: true when that member's old
  // process is taken for dead (then it is declared dead here), false when the
  // name belongs to a live member.
  bool RestartsMember(const std::shared_ptr<Connection>& conn, const Member& info);
  void DeclareDead(const std::string& name, int rank, const std::string& why, bool gone);
  // Names the cluster expelled, with why: convicted here (config_.expel_quorum
  // distinct members accused it) or learned from a view's proposer (with
  // credentials, only with that many accusers' proofs: accusation_proof.h).
  // Their joins are refused for the run.
  msg::Expulsions expelled_;
  std::string expelled_self_;  // why the others expel this node (ExpelledSelf); empty: they do not
  // Accusations by accused name, then by accuser: why, and with credentials
  // the accuser's proof. This node's own (Expel), and each member's own as
  // its heartbeats carry them over its own connection: never relayed, so one
  // member's word counts once.
  std::map<std::string, std::map<std::string, msg::Expulsion>> accusations_;
  msg::Expulsions own_accusations_;  // what this node's heartbeats carry
  // Accusations and convictions refused for want of proof: (name, who), each
  // logged once.
  std::set<std::pair<std::string, std::string>> refused_accusations_;
  // The run (EpochView.runSalt) as this node first learned it: epoch 0's, or
  // the view that admitted it; never replaced, so no later proposer can make
  // another run's signed accusations count.
  std::vector<uint8_t> run_salt_;
  // The cluster and the run in what members sign (ClusterKey::Tag), from
  // run_salt_ once known.
  MacKey accusation_cluster_{};
  void AdoptRun(const msg::EpochView& v);
  // control_expulsion.cc: counts `accuser`'s accusation of `name`; at the
  // quorum, convicts: the name is refused and a live member declared dead.
  void Accuse(const std::string& name, const std::string& accuser, const msg::Expulsion& accusation);
  void LearnAccusations(const msg::Expulsions& accused, const std::string& accuser);
  // Merges the expulsions of a view from its proposer (with credentials,
  // those proven by a quorum of accusers); the coordinator drops a live
  // member among them.
  void LearnExpulsions(const msg::Expulsions& expelled, const std::string& from);
  // With credentials: whether `e` proves (by at least config_.expel_quorum
  // accusers' proofs) that `name` was expelled; logs a refusal once per
  // (name, from). Always true without credentials.
  bool ProvenExpulsion(const std::string& name, const msg::Expulsion& e, const std::string& from);
  // The expelled names this node's views carry (expelled_; plus, under
  // CHORUS_FAULT_FORGE_EXPULSION=NAME, NAME with this node's own proof and a
  // forged one: a lying proposer, for tests).
  msg::Expulsions ExpelledForViews() const;
  // Coordinator: the members others declared dead in this epoch, by name,
  // until judged (JudgeDeathReports in membership.h); cleared by each view.
  std::map<std::string, DeathReport> death_reports_;
  // control_expulsion.cc: every member gets this node's heartbeat (its
  // progress, its accusations, the members it holds dead); each tick, and at
  // once on a new accusation.
  void SendHeartbeat();
  // control_expulsion.cc: coordinator: `h`'s sender, a member, asks for the
  // next epoch over the same members (ControlPlane::RequestReform).
  void NoteReformRequest(const msg::Heartbeat& h);
  // control_expulsion.cc: records `reporter`'s heartbeat naming `name` dead.
  void NoteDeathReport(const std::string& name, const std::string& reporter, Clock::time_point now);
  // Fault injection for tests (docs/testing.md): CHORUS_FAULT_CLAIM_DEAD=
  // NAME@STEP makes this node's heartbeats name NAME dead from its step STEP
  // on, though it hears NAME: a lying member.
  void ClaimDeadIfAsked(msg::Heartbeat& heartbeat) const;
  // Declares dead whom the reports condemn (a confirmed name, or the reporters
  // of one the coordinator heard all along).
  void JudgeDeaths(Clock::time_point now);
  // Why a join under `name` is refused as expelled; empty when it is not.
  std::string ExpelledReason(const std::string& name) const;
  // Refuses (kExpelled) and forgets the waiting joiners whose name was expelled.
  void RefuseExpelledApplicants();
  void HandleProposal(const std::shared_ptr<Connection>& conn, const msg::EpochProposal& p);
  void HandleAck(const msg::EpochAck& ack);
  void HandleWelcome(const std::shared_ptr<Connection>& conn, const msg::Welcome& w);
  void HandleLeave(const msg::Leave& leave);
  void HandleBarrier(const msg::Barrier& b);
  void HandleHeartbeat(const std::shared_ptr<Connection>& conn, const msg::Heartbeat& h);
  void HandleState(const std::shared_ptr<Connection>& conn, const msg::State& s);
  bool IsCoordinator() const;
  std::string ExpectedCoordinator() const;
  bool Gone(const std::string& name) const { return dead_.count(name) || left_.count(name); }
  // A member not gone whose frames still come: not suspect, its connection
  // not lost.
  bool Answers(const std::string& name) const {
    return !Gone(name) && !liveness_.IsSuspect(name) && !liveness_.IsLost(name);
  }
  bool OthersAllGone() const;
  // No message waits in the outbox of a member that is not dead: a leaving
  // node's Leave has gone out to every member that may still wait for it.
  bool OutboxDelivered() const;
  // While leaving: dial every member whose outbox holds messages, whatever the
  // ranks (one that left is still listening until all others confirm).
  void DialForOutbox();
  // Leaving, with messages (our Leave) still queued for `name`, not dead.
  bool LeaveOwedTo(const std::string& name) const {
    return phase_ == Phase::kLeaving && outbox_.count(name) && !dead_.count(name);
  }
  void MaybeFormEpoch0();
  void MaybePropose();
  // True when the members this node still hears are fewer than half of
  // those that may still be running (the view's members less those that
  // left and those dead for sure): this node is on the small side of a cut,
  // and a re-form would train a second model beside the larger part's. It
  // then leaves to join again (LeaveAsCutOff). Exactly half goes on: a
  // cluster of two that loses one to silence, or a split into halves, keeps
  // training; the split probe merges the halves when they meet again.
  bool InMinorityPart(size_t hearing) const;
  void LeaveAsCutOff(size_t hearing);
  void SendProposal();
  void Commit();
  void InstallView(const msg::EpochView& v);
  // InstallView's steps.
  void ReportDroppedMembers(const msg::EpochView& v);
  void AdoptView(const msg::EpochView& v);
  void LeaveAsRemoved(const msg::EpochView& v);
  void ForgetNonMembers();
  void RegisterKnownMembers();
  void DropOldBarriers();
  void CheckLiveness(Clock::time_point now);
  void DialMissing();
  void ResendBarriers();
  // The barrier `name` of membership epoch `epoch` (see ControlPlane::Barrier).
  // `value`: this node's proposal; `*agreed`: the largest of every member's.
  // `windows`: see ControlPlane::BarrierWhileTraining (1: plain Barrier).
  Status BarrierInternal(const std::string& name, uint64_t epoch, bool advance, int64_t value, Deadline deadline,
                         bool* advance_seen, int64_t* agreed, std::vector<std::string>* missing = nullptr,
                         int windows = 1);
  // Whether `name`'s trained-sample count rose after `since` (its heartbeats).
  bool TrainedSince(const std::string& name, Clock::time_point since) const;

  // ---- immutable after construction / Listen() ----
  ClusterConfig config_;
  Member self_;
  std::string incarnation_;  // this process's entry in samples_ (sample_counter.h)
  VersionInfo versions_;
  std::string shared_settings_;
  bool resume_ = false;
  std::shared_ptr<const ClusterKey> key_;
  std::shared_ptr<const NodeCredentials> credentials_;  // with cluster.issuer
  ConnectionOptions conn_options_;
  Duration heartbeat_interval_;
  Duration join_timeout_;
  Duration suspect_after_;
  Duration dead_after_;
  uint16_t port_ = 0;
  std::string advertise_;
  std::string listen_display_;

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer tick_timer_;
  asio::steady_timer join_timer_;        // probe rounds while forming
  asio::steady_timer join_retry_timer_;
  asio::steady_timer shutdown_timer_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;

  // ---- guarded by mu_ ----
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kStarting;
  bool shutting_down_ = false;  // the destructor waits for conns_ to flush and close
  Status failure_;
  std::atomic<bool> failed_{false};  // phase_ is kRemoved or kFailed (EndAs); read without mu_
  bool founder_ = false;  // the founder candidate: not formed, accepts joins for epoch 0
  bool formed_ = false;  // view_ holds an installed epoch
  std::function<void()> on_member_;  // LocalNodeInfo::on_member, until it ran
  MembershipView view_;
  std::vector<std::function<void(const MembershipView&)>> callbacks_;
  std::vector<std::function<void(const MemberFailure&)>> failure_callbacks_;
  std::vector<MemberFailure> to_report_failures_;  // reported after mu_ is released
  std::vector<MembershipView> to_announce_;

  std::set<std::shared_ptr<Connection>> conns_;            // every open connection
  std::map<std::string, std::shared_ptr<Connection>> peers_;  // established, by member name
  std::map<uint64_t, std::string> dialed_member_;          // connection id -> member name we dialed
  std::set<uint64_t> member_conns_;                        // ids of connections that carried a member's message
  std::set<std::string> dialing_;
  std::map<std::string, std::deque<ControlMessage>> outbox_;

  // Forming (control_discovery.cc).
  std::map<std::string, Known> known_;      // by control address as written or learned
  std::map<uint64_t, std::string> probes_;  // probe connection id -> address probed
  Duration probe_delay_{};
  bool bootstrap_names_others_ = false;     // cluster.bootstrap names a node other than this one
  bool contacted_ = false;                  // another node answered our probe, probed us or joined us
  // A formed cluster of this job that answered us (its node, "name (address)"),
  // or "". Such a node founds no cluster of its own: the one it reached may be
  // re-forming, splitting or ending, and a cluster of its own would train a
  // replica from scratch beside it. It looks until cluster.join_timeout_s.
  std::string reached_formed_;
  Clock::time_point last_wait_log_{};
  int64_t progress_step_ = -1;              // ReportProgress
  int64_t progress_next_admission_ = 0;
  uint64_t progress_samples_ = 0;  // this incarnation's count (ReportSamples)
  SampleCounter samples_;          // the cluster's, merged from every heartbeat and live state
  struct SamplesHeard {  // a member's latest own count, and its rate since the one before
    std::string incarnation;
    uint64_t samples = 0;
    Clock::time_point at;
    double per_second = 0.0;
  };
  std::map<std::string, SamplesHeard> samples_heard_;  // by member name: its current incarnation's rate
  Clock::time_point stalled_at_{};  // when OnTick last found its thread had stalled

  // Split detection (control_split.cc): members the views dropped, by name,
  // probed now and then while recent.
  struct Departed {
    std::string address;
    Clock::time_point since;
    bool probing = false;
  };
  std::map<std::string, Departed> departed_;
  // The coordinator of the part this node's part yielded to (a split).
  std::string yielded_to_;
  std::map<uint64_t, std::string> split_probes_;  // probe connection id -> departed name
  Clock::time_point next_split_probe_{};

  // Joining.
  int join_redirects_ = 0;
  bool join_dialing_ = false;
  Duration join_retry_delay_{};
  Clock::time_point next_join_at_{};
  Clock::time_point join_started_{};
  std::shared_ptr<Connection> join_conn_;
  std::string join_address_;
  std::string last_refusal_;            // the latest retryable refusal of our join
  std::optional<Status> name_refusal_;  // a duplicate-name refusal, retried until join_timeout_s
  std::string coordinator_name_;        // who accepted our join
  std::string applied_address_;         // its address
  msg::State applied_state_;            // its latest State

  // Coordinator: candidates for epoch 0 (founder) or joiners waiting for a boundary.
  std::vector<Applicant> applicants_;
  bool run_ended_ = false;  // Leave at the end of this node's run: joins get kRunEnded
  std::optional<Proposal> proposal_;
  // The latest proposal not acked because a member ranking below its
  // proposer is still alive here (HandleProposal). Acked the moment this
  // node finds that member gone too (AckDeferredProposal), where waiting for
  // the proposer to send it again costs up to a heartbeat.
  struct DeferredProposal {
    std::weak_ptr<Connection> conn;
    msg::EpochProposal proposal;
  };
  std::optional<DeferredProposal> deferred_proposal_;
  bool advance_requested_ = false;
  // Re-forming the same members (ControlPlane::RequestReform): the epoch
  // this node asked to re-form (its heartbeats carry the request while its
  // view is at it), and, at the coordinator, whether a member of the view
  // asked: the next proposal then comes without a death or a joiner.
  std::optional<uint64_t> reform_asked_;
  bool reform_requested_ = false;
  // Barrier-free admission (ControlPlane::AdmitOnItsOwn): the coordinator
  // proposes waiting joiners by itself while the cluster's count is below
  // admit_until_samples_ less what it trains in a few heartbeats.
  bool admit_on_its_own_ = false;
  uint64_t admit_until_samples_ = 0;

  LivenessTable liveness_;
  Clock::time_point last_tick_{};
  std::set<std::string> dead_;
  // Of dead_: those whose process is known to be gone (nothing listens at
  // its control address, or a new process took its name there), not only
  // silent. A silent member may be alive on the far side of a cut.
  std::set<std::string> dead_for_sure_;
  std::map<std::string, bool> left_;  // members that sent Leave -> whether `stopping`

  std::map<BarrierKey, BarrierState> barriers_;
  std::map<std::pair<uint64_t, std::string>, uint64_t> barrier_counters_;
};

}  // namespace chorus::node
