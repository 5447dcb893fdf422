// node/control/: the control plane (Asio TCP, Cap'n Proto frames, HMAC auth,
// membership); the only folder that sees Asio, Cap'n Proto and libsodium.
//
// The control plane of one node: listen, join, membership epochs, heartbeats,
// barriers, leave (docs/design.md "Runtime of one node", step 2).
//
// Protocol in short (details in control_discovery.cc, control_plane.cc and
// control_membership.cc):
//  - A node listens on cluster.listen and checks at start that its advertised
//    address answers a hello from itself.
//  - Forming, with no designated founder: a node not in a formed cluster
//    probes the addresses it knows (cluster.bootstrap, then what the answers
//    and the other probers tell it) until it is a member. Of itself and the
//    unformed nodes that answered, the lowest address (AddressBefore in
//    membership.h) is the founder candidate; the others send it their joins.
//    A candidate that finds a lower unformed node redirects its applicants
//    there and joins it too. A node that finds a formed cluster joins that
//    instead; a member that is not the coordinator redirects the join to it.
//  - The coordinator (the founder candidate until epoch 0, then the
//    lowest-ranked live member) owns membership. With cluster.min_nodes
//    candidates it fixes epoch 0 (ranks: RanksBefore in membership.h) and
//    sends it to everyone.
//  - One cluster: an applicant joins one candidate at a time, so when more
//    than half of the nodes started are needed (cluster.min_nodes > half of
//    them), two disjoint groups cannot both reach cluster.min_nodes. With
//    fewer, nodes that cannot reach each other may form separate clusters.
//  - Members keep one connection per pair (the higher rank dials) and send
//    heartbeats every heartbeat_interval_s. Silent for suspect_timeout_s is
//    suspect, for dead_timeout_s dead (sooner when its connection closed and
//    dials to it are refused); a member that leaves says so. The
//    coordinator then proposes epoch e+1 with the survivors, every member acks,
//    the coordinator commits, and every member logs "epoch N: members ...".
//  - A node that joins after epoch 0 waits; the coordinator admits it at the
//    next epoch boundary (AdvanceEpochIfPending, called by every member). A
//    join under a member's name whose old process is gone (restarted) declares
//    that member dead and waits likewise.
//
// Threading: one Asio io_context runs on its own thread (the control thread).
// Every public method is thread-safe and may block only until its Deadline.
// Must not: touch the data plane or the model; it only carries the data-plane
// address as opaque bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "node/config/config.h"
#include "node/control/credentials.h"
#include "node/control/membership.h"

namespace chorus::node {

// What this node tells the others about itself.
struct LocalNodeInfo {
  std::string name;                   // unique in the cluster; default "node<rank_hint>" or "<host>-<pid>"
  std::vector<uint8_t> data_address;  // opaque data-plane address (transport LocalAddress())
  trainer::Device device;             // the CPU or a GPU
  int batch_size = 0;
  std::string host_group;             // default: cluster.host_group, then the host name
  std::string site;                   // default: cluster.site, then the host group
  // Must match exactly across the cluster (a mismatch is refused, naming both).
  std::string chorus_version;
  std::string libfabric_version;
  std::string provider;               // gossip::ProviderName of fabric.provider
  std::string provider_version;
  // Settings every member must share, one "key = value" line each (the node
  // sends SharedSettingsText: its [exchange] and [topology], and what fixes a
  // step's computation in [train] and [data]; members that disagree would run
  // different collectives or train different models); a joiner whose text
  // differs is refused, naming the first line that does. Empty for tools
  // without such settings.
  std::string shared_settings;
  // The node resumes from its checkpoint (--resume). The founding members
  // (epoch 0) must agree: they synchronise the resumed state collectively, so
  // a founding node that differs from the coordinator is refused, naming both.
  // A node that joins a formed cluster is synchronised by its admission, so
  // its flag is not compared.
  bool resume = false;
  // A bound, listening TCP socket to serve instead of binding cluster.listen
  // (-1: none). `chorus launch` hands node0 the bootstrap port's socket this way
  // (CHORUS_LISTEN_FD), so no other process can take the port first. The
  // control plane owns it from Start on.
  int listen_fd = -1;
  // Runs once, on the control thread, when this node first holds a view,
  // before the view is logged or announced (a launcher reads that line as
  // "the cluster formed"). Must not block or call the control plane.
  std::function<void()> on_member;
};

// This node's credential as cluster.issuer, cluster.credential and
// cluster.revoked name it, for the node `name` ("" : the file's name); null
// when the cluster has no issuer. What a starting node and `config check`
// read alike (NodeCredentials::Load's errors).
[[nodiscard]] Result<std::shared_ptr<const NodeCredentials>> LoadClusterCredential(const ClusterConfig& config,
                                                                                  const std::string& name);

class ControlPlaneImpl;

class ControlPlane {
 public:
  // Listens, runs the self-check against the advertised address, logs the
  // versions and starts founding or joining in the background. Errors: a bad
  // listen/advertise address, a port in use, a failed self-check.
  [[nodiscard]] static Result<std::unique_ptr<ControlPlane>> Start(const ClusterConfig& config,
                                                                   LocalNodeInfo local);
  // Stops without leaving: the others will see this node die.
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // The port actually listened on (cluster.listen may say 0).
  uint16_t port() const;
  // The address peers dial ("host:port").
  const std::string& advertise_address() const;
  const std::string& name() const;

  // Waits until this node is a member of some epoch (epoch 0, or a later one for
  // a node that joined a running cluster) and returns that view. Fails when
  // joining failed (no node of cluster.bootstrap reached within join_timeout_s,
  // wrong token, version or settings mismatch, a duplicate name still refused
  // at join_timeout_s) or at the deadline; either error says what this node
  // reached, whom it waits for and its role.
  [[nodiscard]] Result<MembershipView> WaitForEpoch0(Deadline deadline);

  // The latest installed view (epoch 0 with no members before joining). Its
  // self_rank is -1 once this node has left or was removed by the others.
  MembershipView View() const;
  // View().epoch without copying the view (a training loop asks every step).
  uint64_t Epoch() const;
  // Ok while this node is a member or joining; once the others removed it, or
  // its part of a split cluster yielded, or the control plane failed: why
  // (Aborted, or the failure). A training loop checks it every step, so that
  // a node training alone (no exchange to fail) stops too.
  Status Failure() const;
  // True once the others installed an epoch without this node (it was
  // frozen or cut off past the dead timeout), or its part of a split
  // cluster yielded: it may join again as a new node (cluster.rejoin). Not
  // after it left or failed.
  bool Removed() const;
  // Once Removed(): the control addresses to join again through, best
  // first (the coordinator of the part it yielded to, then the members of
  // the view that removed it).
  std::vector<std::string> RejoinAddresses() const;
  // Called on the control thread after each new view is installed (also the
  // one with self_rank -1 that removes this node). Keep it short.
  void OnViewChange(std::function<void(const MembershipView&)> callback);
  // Called on the control thread when a member of the current view fails, in
  // two steps: its connection closes (a killed process closes it at once:
  // kConnectionLost, a hint, also seen for a live member whose connection
  // broke), then this node declares it dead (refused dials or silence:
  // kDeclaredDead; never for a member that left). A member that leaves before
  // its run's end (Leave with LeaveKind::kStopping) is reported once, as
  // kStopped. Keep it short.
  void OnMemberFailure(std::function<void(const MemberFailure&)> callback);
  // This node's check names the member `name` as sending poison
  // (node/exchange/poison_check.h): an accusation, which this node's
  // heartbeats carry to every member. Once cluster.expel_quorum distinct
  // members accused it (this one included), a member convicts: it declares
  // `name` dead (as for silence: its failure is reported, and the others drop
  // it from the next view), and a join under that name is refused for the
  // rest of the run (kExpelled: the joiner exits), also once the name is no
  // longer in the view; the conviction travels in views. `why` goes to the
  // log. `name` this node's own: its own check names it, so it knows the
  // others expel it (ExpelledSelf). Any thread.
  void Expel(const std::string& name, const std::string& why);
  // Why the others expelled this node, as far as it knows (its own poison
  // check, or an expulsion of its name heard from a member); empty when they
  // did not. Such a node does not join again (cluster.rejoin).
  std::string ExpelledSelf() const;
  // This node's credentials (cluster.issuer), null without; they never
  // change while it runs.
  std::shared_ptr<const NodeCredentials> Credentials() const;
  // Waits for a view with epoch > `epoch`. Aborted when this node was removed.
  [[nodiscard]] Result<MembershipView> WaitForEpochAbove(uint64_t epoch, Deadline deadline);
  // This node's exchange failed in epoch `epoch` and no member is gone, so no
  // death or leave will start the next epoch (a member's training stalled
  // past fabric.op_timeout_s while its process lives, a message was
  // refused): asks the coordinator, in this node's heartbeats, for the next
  // epoch over the same members. That view (MembershipView::reform) ends the
  // epoch's data-plane operations on every member, as a death does, so that
  // all of them re-form in it. Nothing when the view is past `epoch`
  // already. Any thread.
  void RequestReform(uint64_t epoch);
  // Whether this node's view is still at `epoch` and every other member of
  // it answers: heard within cluster.suspect_timeout_s, and none declared
  // dead, leaving or lost. Then no death or leave is on its way to start the
  // next epoch (a member frozen before an operation that waited
  // fabric.op_timeout_s for it is suspect by then). Any thread.
  bool EveryMemberAnswers(uint64_t epoch) const;
  // The member `name` answers heartbeats but did not meet a re-form the
  // others met (its training hangs while its control thread runs): this node
  // declares it dead, as for silence, and its heartbeats say so. The
  // coordinator drops it once it hears that from cluster.expel_quorum
  // members (one member's word removes nobody); the node, once it runs
  // again, finds itself removed and rejoins (cluster.rejoin). `why` goes to
  // the log. Any thread.
  void DeclareUnresponsive(const std::string& name, const std::string& why);

  // Returns when every member of membership epoch `epoch` has called
  // Barrier(name, epoch). Aborted when this node's view is past `epoch`
  // already, or moves past it first (retry in the new epoch): a node still
  // installing an older epoch must not take part in the newer epoch's barrier
  // of the same name. DeadlineExceeded names the members that did not arrive,
  // also in `*missing` when given.
  [[nodiscard]] Status Barrier(const std::string& name, uint64_t epoch, Deadline deadline,
                               std::vector<std::string>* missing = nullptr);
  // Barrier, with patience for members that train: when the deadline passes
  // and every member still missing trained during the wait (the trained-sample
  // count in its heartbeats rose: a long DiLoCo inner phase on a slower node
  // is on its way here), the wait goes on for as long again, up to `windows`
  // waits in all. A missing member whose count stood still (its training
  // hangs while its control thread answers) ends the wait: DeadlineExceeded,
  // and `*missing` holds only those that stood still (after the last wait:
  // every member missing).
  [[nodiscard]] Status BarrierWhileTraining(const std::string& name, uint64_t epoch, Deadline deadline, int windows,
                                            std::vector<std::string>* missing);

  // The epoch boundary of the training loop: every member calls it at the same
  // point. When nodes wait to join, the coordinator proposes the next epoch with
  // them and every member returns that view; otherwise the current view.
  // `proposal`: this member's value for the next boundary (the loop proposes a
  // step); `*agreed` (when given): the largest proposal of every member when
  // the view stayed the same (then every member gets the same value), else -1.
  [[nodiscard]] Result<MembershipView> AdvanceEpochIfPending(Deadline deadline, int64_t proposal = 0,
                                                             int64_t* agreed = nullptr);
  // Nodes waiting to be admitted (known to the coordinator only; empty elsewhere).
  std::vector<std::string> PendingJoiners() const;

  // Where the training loop stands: its latest step and the step of its next
  // admission point (0: unknown). Only stored; the coordinator tells joiners.
  void ReportProgress(int64_t step, int64_t next_admission_step);
  // The samples this node has trained so far; heartbeats carry it.
  void ReportSamples(uint64_t samples);
  // The samples the cluster has trained: the sum of its grow-only counter
  // (sample_counter.h) over every incarnation heard of, this one's count,
  // departed and restarted nodes' earlier runs included (up to a heartbeat
  // interval old). A lower bound: the cluster trained at least this many.
  uint64_t ClusterSamples() const;
  // ClusterSamples with each live member's count extrapolated at its last
  // rate for up to two heartbeat intervals: closer to the truth while all
  // train steadily, but above it while a member pauses.
  uint64_t ClusterSamplesEstimate() const;
  // The counter itself, by incarnation: what a checkpoint and a joiner's live
  // state carry; and merged back (entry-wise maximum) from one.
  std::map<std::string, uint64_t> SampleCounts() const;
  void MergeSampleCounts(const std::map<std::string, uint64_t>& counts);
  // Barrier-free admission, for a cluster whose nodes train at their own
  // pace: as coordinator, this node admits waiting joiners by itself, in an
  // epoch of their own (never with a departure), without a barrier of the
  // members' training loops: each member follows the new view between its
  // steps (and its in-flight operations of the older epoch end at once). No
  // joiner is admitted once the cluster's count is within a few heartbeats'
  // samples of `until_samples` (the run's budget), so that no member that
  // has begun to finish meets a new epoch.
  void AdmitOnItsOwn(uint64_t until_samples);

  // Tells the others this node leaves, waits until they have moved to an epoch
  // without it (or nobody is left to confirm), then closes every connection.
  // `kind`: see LeaveKind (membership.h).
  [[nodiscard]] Status Leave(Deadline deadline, LeaveKind kind = LeaveKind::kDone);

 private:
  explicit ControlPlane(std::unique_ptr<ControlPlaneImpl> impl);
  std::unique_ptr<ControlPlaneImpl> impl_;
};

}  // namespace chorus::node
