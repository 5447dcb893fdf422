// CollectiveGroup: the members of one collective call, as indices 0..size-1
// mapped onto a Transport's ranks. The whole membership by default; a subset for
// the steps of hierarchical all-reduce (one host's ranks, the host leaders).
//
// Must not: own the transport or send anything itself.
#pragma once

#include <vector>

#include "common/status.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

class CollectiveGroup {
 public:
  // Every rank of the transport, index == rank.
  static Result<CollectiveGroup> World(Transport& transport);
  // `members` lists distinct transport ranks in index order; this endpoint's rank
  // must be one of them (FailedPrecondition otherwise).
  static Result<CollectiveGroup> Of(Transport& transport, std::vector<Rank> members);
  // The members of this group at `indices` (distinct, in range, containing self()).
  Result<CollectiveGroup> Sub(const std::vector<int>& indices) const;

  Transport& transport() const { return *transport_; }
  int size() const { return static_cast<int>(members_.size()); }
  int self() const { return self_; }
  Rank RankAt(int index) const { return members_[index]; }
  // Index of a transport rank, or -1.
  int IndexOf(Rank rank) const;

 private:
  CollectiveGroup(Transport* transport, std::vector<Rank> members, int self)
      : transport_(transport), members_(std::move(members)), self_(self) {}

  Transport* transport_;
  std::vector<Rank> members_;
  int self_;
};

}  // namespace chorus::gossip
