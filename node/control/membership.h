// Membership data and the pure rules over it: members, views, deterministic
// ranks and the liveness table (silent -> suspect -> dead).
//
// Everything here is plain data and functions of their arguments (time comes in
// as a parameter), so the rules are testable without sockets or threads. The
// protocol that moves these values between nodes is in control_plane*.cc; this
// file must not know about connections, Asio or Cap'n Proto.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "trainer/choices.h"

namespace chorus::node {

// One node of the cluster as every member sees it (its join info plus its rank).
struct Member {
  int rank = -1;                      // dense, 0..size-1 within one epoch; -1 before one is assigned
  std::string name;                   // unique within the cluster ("node3")
  std::string control_address;        // "host:port" peers dial (the advertised address)
  std::vector<uint8_t> data_address;  // opaque data-plane address (fi_getname blob)
  trainer::Device device;             // the CPU or a GPU
  int batch_size = 0;                 // per-node mini-batch
  std::string host_group;             // nodes sharing a host group can use shm / hierarchical steps
  int rank_hint = -1;                 // preferred position in epoch 0; -1 when not set
  // Where the node is: members of one site share fast links, and links between
  // sites are slow (cluster.site; default: the host group).
  std::string site;

  bool operator==(const Member&) const = default;
  // The member's host key: host_group, else its name.
  const std::string& HostKey() const { return host_group.empty() ? name : host_group; }
  // The member's site: site, else its host key.
  const std::string& SiteKey() const { return site.empty() ? HostKey() : site; }
};

// The membership of one epoch as seen by one node.
struct MembershipView {
  uint64_t epoch = 0;
  int self_rank = -1;                // this node's rank; -1 when it is not a member
  std::vector<Member> members;       // members[i].rank == i
  std::vector<int> departed;         // ranks, in the previous epoch, of members that died or left
  std::vector<std::string> joined;   // names of members new in this epoch (empty for epoch 0)
  // The epoch's data-plane key (Transport::SetEpochKey): derived from the
  // cluster token and `data_salt`, a random value fresh in every view
  // (ClusterKey::DataKey); all zero in a view that no control plane made.
  std::vector<uint8_t> data_salt;
  std::array<uint8_t, 32> data_key{};
  // A member asked for this epoch over the same members after its exchange
  // failed with none gone (ControlPlane::RequestReform): it ends the previous
  // epoch's data-plane operations on every member, as a death does.
  bool reform = false;

  int size() const { return static_cast<int>(members.size()); }
  // The members' batches summed: the cluster's global batch.
  int GlobalBatch() const {
    int total = 0;
    for (const Member& m : members) total += m.batch_size;
    return total;
  }
  // The member named `name`, or nullptr.
  const Member* Find(const std::string& name) const;
  // "epoch 2: members node0 node2 node3 node5 (departed ranks 1; joined node5)":
  // the line every node logs when it installs a view. Names are in rank order.
  std::string Describe() const;
};

// Each rank's host key for hierarchical all-reduce (host_group, else its name).
std::vector<std::string> HostKeys(const MembershipView& view);
// Each rank's site for link-aware collectives (site, else its host key), or
// none (rank order) when `link_aware` is off: gossip::Collective::Create's
// site_keys.
std::vector<std::string> SiteKeys(const MembershipView& view, bool link_aware);
// Whether each member is in another site than this node (SiteKey), by rank:
// Transport::SetOtherSites, PeerInfo::other_site. All false when the view
// has no self.
std::vector<bool> OtherSites(const MembershipView& view);

// Why a node leaves (ControlPlane::Leave). kDone: at the end of its run; the
// others may still be completing operations it took part in, and nothing of
// theirs ends. kStopping: before the end (a stop signal); their operations of
// this epoch end at once (MemberFailure::kStopped), as for a death, and they
// re-form without it.
enum class LeaveKind { kDone, kStopping };

// What ControlPlane::OnMemberFailure reports: the member, its rank in the current view, and
// how far its failure has gone. kStopped: it left before its run's end (a Leave
// with `stopping`), which ends the epoch's operations as a declared death does.
struct MemberFailure {
  enum class Kind { kConnectionLost, kDeclaredDead, kStopped };
  std::string name;
  int rank = -1;
  Kind kind = Kind::kConnectionLost;
  // Its process can no longer touch this node's memory: declared dead because
  // dials to it were refused (nothing listens: the process is gone), or it
  // stopped (it ended its data-plane operations before it said so). Not for
  // silence: a stopped process may run again. Transport::PeerGone.
  bool gone = false;
};

// The order of epoch 0: members with a rank hint first (by hint), then the rest;
// ties broken by node name, then by control address.
bool RanksBefore(const Member& a, const Member& b);

// The total order of control addresses that picks the founder candidate
// among nodes forming a cluster (the lowest address wins): by host as parsed
// from "host:port" (text order, brackets of IPv6 removed), then by port as a
// number ("h:900" before "h:1000"). Text that does not parse follows every
// address that does, in text order; equal text is not before itself.
bool AddressBefore(const std::string& a, const std::string& b);

// Epoch 0: sorts `candidates` by RanksBefore and assigns ranks 0..n-1.
std::vector<Member> AssignInitialRanks(std::vector<Member> candidates);

// Epoch e+1: `survivors` keep their relative order (they are given in their old
// rank order), then `joiners` follow in RanksBefore order; ranks 0..n-1.
std::vector<Member> AssignNextRanks(std::vector<Member> survivors, std::vector<Member> joiners);

// Tracks when each member was last heard from and classifies silence:
// silent for `suspect_after` is suspect, for `dead_after` is dead. A member is
// also dead sooner, once its connection closed and kRefusedDialsForDead dials
// in a row were refused with no frame from it between: nothing listens at its
// control address, so its process is gone (a stopped or starved one still
// completes TCP connects and is judged by silence). Dead is final until
// Reset(). Not thread-safe (the control thread owns it).
class LivenessTable {
 public:
  enum class Change { kSuspect, kRecovered, kDead };
  struct Event {
    std::string name;
    Change change;
    double silent_s;       // how long the member had been silent
    int refused_dials = 0;  // kDead: the refusals that decided it (0: silence did)
  };
  static constexpr int kRefusedDialsForDead = 2;

  LivenessTable(Duration suspect_after, Duration dead_after)
      : suspect_after_(suspect_after), dead_after_(dead_after) {}

  // Starts tracking exactly `names`, all heard at `now`. A member still tracked
  // keeps a lost connection and its refusals (it did not answer since).
  void Reset(const std::vector<std::string>& names, Clock::time_point now);
  // Records a frame from `name` (ignored when untracked or already dead); the
  // member is no longer lost.
  void Heard(const std::string& name, Clock::time_point now);
  // Counts every live member as heard at `now`: after this node itself stalled
  // (suspended, starved of CPU) their silence says nothing about them.
  void HeardAll(Clock::time_point now);
  // The connection to `name` closed: refused dials count from now on.
  void ConnectionLost(const std::string& name);
  // A dial to `name` was refused (counted only while its connection is lost).
  void DialRefused(const std::string& name);
  // Classifies every tracked member; returns the transitions since the last call.
  std::vector<Event> Check(Clock::time_point now);
  bool IsDead(const std::string& name) const;
  bool IsSuspect(const std::string& name) const;
  // Its connection closed and no frame came since: worth dialing from this
  // side too, whatever the ranks.
  bool IsLost(const std::string& name) const;

 private:
  struct Entry {
    Clock::time_point last_heard;
    bool suspect = false;
    bool dead = false;
    bool lost = false;
    int refused_dials = 0;
  };
  Duration suspect_after_;
  Duration dead_after_;
  std::map<std::string, Entry> entries_;
};

// What the coordinator does with the members that others declared dead in
// the current epoch (their heartbeats name them). A member that declared a
// peer dead has ended the epoch's data-plane operations with it, so the epoch
// cannot go on with both; but one member's word must not remove another
// (it may lie, or only its own link may have failed). A report is confirmed,
// and the named member dropped, at once when the named member's connection to
// the coordinator is lost too or when `quorum` members reported it; otherwise
// the coordinator listens for `grace` (counted from the report, or from its
// own last stall, when others' silence said nothing): a named member still
// silent then goes, one heard goes free and the reporters go instead (of two
// members that declared each other dead, a link cut between them, only one
// goes). A coordinator that keeps stalling for kStalledGraces graces cannot
// judge, and takes the word so that the epoch goes on.
struct DeathReport {
  std::set<std::string> reporters;
  Clock::time_point first_at;  // when the coordinator first heard the report
};
struct DeathVerdict {
  std::string name;  // to declare dead
  std::string why;
};
struct CoordinatorJudgement {
  std::function<bool(const std::string&)> lost_here;    // its connection to the coordinator closed, no frame since
  std::function<bool(const std::string&)> silent_here;  // suspect at the coordinator
  Clock::time_point heard_since{};                      // the coordinator's last stall ended here
  int quorum = 2;
  Duration grace{};
};
inline constexpr int kStalledGraces = 4;
// Consumes the reports it decides (confirmed or expired) from `reports`, keyed
// by the name declared dead; the caller has removed reporters and names no
// longer in the view. Verdicts in name order, each name at most once.
std::vector<DeathVerdict> JudgeDeathReports(std::map<std::string, DeathReport>& reports,
                                            const CoordinatorJudgement& judge, Clock::time_point now);

}  // namespace chorus::node
