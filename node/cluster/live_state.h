// The live state of a training node, and how a node that joins a running
// cluster gets it: from a member, over the data plane, at the membership epoch
// that admits it.
//
// LiveState is what the training loop exposes: its trainer's checkpoint in
// memory with where the loop stands (step, epoch, data order, schedule), and
// whether this node still lacks the cluster's state. ShareLiveState is a
// collective over one membership epoch: the members agree on who needs the
// state (a small all-reduce of flags), the lowest-ranked member that has it
// sends it to each that needs it, in chunks after a header with its length and
// CRC-32, and each receiver checks the CRC before it restores anything. When
// the sender dies mid-transfer the collective fails on every member; the
// exchange's re-form installs the next epoch and runs it again there, so the
// joiner gets the state from the next member in rank order.
//
// Must not: decide membership or pick the epoch (the exchange calls it at
// admissions and re-forms), or parse the state (the LiveState does).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "node/cluster/cluster_session.h"
#include "node/cluster/live_state_wire.h"
#include "node/control/membership.h"

namespace chorus::node {

class LiveState {
 public:
  virtual ~LiveState() = default;
  // True while this node lacks the cluster's state (it joined a running
  // cluster and has not received it yet).
  virtual bool NeedsState() const = 0;
  // This node's state is behind the cluster's (it resumed from an older
  // checkpoint than the others): NeedsState() is true until the next
  // ShareLiveState replaces it.
  virtual void NeedState() = 0;
  // The step this node runs next (between steps; its restored one after Restore).
  virtual int64_t NextStep() const = 0;
  // This node's state, `next_step` being the step it runs next.
  [[nodiscard]] virtual Result<std::vector<uint8_t>> Capture(int64_t next_step) = 0;
  // Takes another member's Capture as this node's state (`from` names the
  // sender in errors and logs); NeedsState() is false afterwards.
  [[nodiscard]] virtual Status Restore(std::span<const uint8_t> bytes, const std::string& from) = 0;
  // The step in progress is applied on no member (a re-form abandoned it):
  // its batch goes back to the data, and it stays the step to run next
  // (NextStep, Capture). Once per step: a second call changes nothing.
  virtual void PutBackStep() = 0;
};

// Every rank's `mine` (the same length on each), rank r's at r * mine.size(),
// each exactly as its rank sent it (Collective::Allgather: direct, so no rank
// passes on another's figures, which the contribution check judges every
// step). One round of n - 1 small messages each way. With `equivocators`,
// Collective::AgreedAllgather's two rounds instead: every honest rank holds
// the same parts even where one member sent different ones to different
// ranks (those without a majority are NaN and named there). `bend`: fault
// injection (Collective::PartFor). `signer`: the parts signed, so that three
// ranks agree too (Collective::AgreedAllgather).
[[nodiscard]] Result<std::vector<float>> GatherFromEveryRank(const gossip::Collective& collective,
                                                             std::span<const float> mine, gossip::Tag tag_base,
                                                             Deadline deadline,
                                                             std::vector<int>* equivocators = nullptr,
                                                             const gossip::Collective::PartFor& bend = nullptr,
                                                             const gossip::PartSigner* signer = nullptr);

// Every member's `mine`, in rank order, at the tags of the values gathered
// from members in membership epoch `epoch` (Exchange::GatherFromMembers, the
// tags below): one value each, in float.
[[nodiscard]] Result<std::vector<double>> GatherMemberValues(const gossip::Collective& collective, uint64_t epoch,
                                                             double mine, Deadline deadline);

// The tags ShareLiveState uses in membership epoch `epoch`: disjoint from the
// fusion buckets (EpochTagBase + b << 20, b < 2^17; an outer exchange, which
// has none, uses b < 2^15 for its site averages and + 1 << 36 for its
// broadcasts inside sites), the outer syncs (+ 1 << 37), the re-form broadcasts
// (+ 1 << 39, four ranges of 2^20, six with an outer optimizer's, and a
// seventh for the outer exchange's failed-sync agreement), the collectives
// at the end of training
// (+ 1 << 38, five ranges of 2^20), the resume-step agreement (+ 3 << 38) and
// the values gathered from members (+ 5 << 37: Exchange::GatherFromMembers;
// + 1 << 30 the overlap model's figures, + 2 << 30, + 3 << 30 and + 5 << 30
// the all-reduce's, the outer step's and the site average's contribution
// checks, poison_check.h, each with an audited step's figures at + 1 << 29,
// poison_audit.h).
inline gossip::Tag LiveStateTagBase(uint64_t epoch) { return EpochTagBase(epoch) + (gossip::Tag{7} << 37); }

// The tags of the site probe in membership epoch `epoch` (site_probe.h):
// three ranges of kTagsPerCollective at + 3 << 37 (the pairs' probes, and two
// gathers), between the collectives at the end of training and the
// resume-step agreement.
inline gossip::Tag SiteProbeTagBase(uint64_t epoch) { return EpochTagBase(epoch) + (gossip::Tag{3} << 37); }

struct LiveStateShared {
  int receivers = 0;        // members that needed the state
  int64_t next_step = 0;    // the step to run next: the sender's for a receiver
  size_t bytes = 0;         // the state's size (0 when nobody needed it)
  std::string sender;       // who sent it, the first source ("" when nobody needed it)
  int sources = 0;          // members it came from (striped), 0 when nobody needed it
};

// Collective over `view` (every member calls it with the collective of that
// epoch): members whose `state` NeedsState() receive the state of the
// lowest-ranked member that does not, and restore it. With `max_sources`
// above 1 the state comes striped from up to that many members that hold it
// (the chunks dealt evenly among them), so that S senders' links carry it in
// parallel: a chunk comes from any source that holds it as the lowest-ranked
// does (checked first by a gather of their CRCs and sizes, then of a CRC per
// chunk where only some differ: all-reduce replicas on CPUs are bitwise
// equal but for BatchNorm's running statistics), the rest from the
// lowest-ranked. Holders whose states differ in size, and `max_sources` 1,
// send from one. The receivers restore exactly the lowest-ranked holder's
// bytes. `next_step`: the step
// this node runs next (a receiver's becomes the sender's). FailedPrecondition
// when every member needs the state (nobody holds it); DataLoss when the
// bytes arrive corrupt (CRC); the transport's errors when a member dies.
// `round` (0 to 15) keeps the tags of several transfers in one epoch apart.
[[nodiscard]] Result<LiveStateShared> ShareLiveState(const gossip::Collective& collective,
                                                     const MembershipView& view, LiveState& state,
                                                     int64_t next_step, Deadline deadline, int round = 0,
                                                     int max_sources = 1);

// ShareLiveState where the loop gave a LiveState (`state` may be null: nothing
// to share); returns the step to run next (a receiver's is the sender's).
[[nodiscard]] Result<int64_t> ShareLiveStateIfAny(const gossip::Collective& collective, const MembershipView& view,
                                                  LiveState* state, int64_t next_step, Deadline deadline,
                                                  int round = 0, int max_sources = 1);

// Own pace (ControlPlane::AdmitOnItsOwn): no collective, nobody waits. The
// member of rank 0 pushes its state to each member new to it when it follows
// a view (between its steps), and trains on while the sends complete; the
// joiner receives from rank 0 of the view that admitted it. A push from a
// member that did not follow that very view (it skipped it) is not taken:
// the joiner's receive ends at its deadline and it joins again.
class LiveStatePush {
 public:
  // Captures `state` (`next_step` next) and posts it to rank `to` of `view`
  // with the tags of `view`'s epoch; returns at once.
  [[nodiscard]] static Result<std::unique_ptr<LiveStatePush>> Start(gossip::Transport& transport,
                                                                    const MembershipView& view, int to,
                                                                    LiveState& state, int64_t next_step,
                                                                    Deadline deadline);
  // Releases the sends (the buffers are kept for good where the provider holds them).
  ~LiveStatePush();
  // True once every send completed, one failed, or the deadline passed (each
  // logged): the push can be dropped. Never blocks.
  bool Reap();

 private:
  explicit LiveStatePush(Deadline deadline) : deadline_(deadline) {}
  Deadline deadline_;
  double started_ = NowSeconds();
  std::string to_;
  std::vector<uint8_t> head_, bytes_;
  std::vector<gossip::RequestPtr> requests_;
};

// FailedPrecondition: every member of `epoch` joined and waits for the state.
[[nodiscard]] Status NobodyHoldsTheState(uint64_t epoch);

// The joiner's side of a LiveStatePush: receives rank `from`'s push at
// `view`'s epoch and restores it (`state`). Returns the step to run next.
[[nodiscard]] Result<int64_t> ReceivePushedLiveState(gossip::Transport& transport, const MembershipView& view,
                                                     int from, LiveState& state, Deadline deadline);

}  // namespace chorus::node
