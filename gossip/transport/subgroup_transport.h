// SubgroupTransport: a Transport over some of another transport's ranks,
// renumbered 0..size-1 in the order given, so that a protocol written for a
// whole membership (a gossip protocol and its graph) runs inside a group of
// it, such as the members of one site.
//
// Sends and receives go through the underlying transport with the same tags;
// completions name the local rank. The membership calls (BeginEpoch,
// SetEpochKey, SetPeers, Discard) belong to the underlying transport's owner:
// here SetPeers fails and the others do nothing. Stats and UnreleasedBuffers
// are the underlying transport's.
//
// Must not: own the underlying transport, which must outlive it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

class SubgroupTransport final : public Transport {
 public:
  // `members` lists distinct ranks of `world` in local order and includes
  // world.rank(); InvalidArgument otherwise.
  static Result<std::unique_ptr<SubgroupTransport>> Create(Transport& world, std::vector<Rank> members);

  std::vector<uint8_t> LocalAddress() const override { return world_.LocalAddress(); }
  Status SetPeers(Rank self, std::span<const PeerInfo> peers) override;
  Rank rank() const override { return self_; }
  int size() const override { return static_cast<int>(members_.size()); }
  // A local rank outside [0, size) or kAnySource: InvalidArgument.
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override;
  Result<RequestPtr> Irecv(Rank source, Tag tag, std::span<std::byte> data) override;
  void MarkPeerDead(Rank peer) override;
  bool PeerMarkedDead(Rank peer) const override;
  void Discard(TagFilter /*filter*/) override {}
  int UnreleasedBuffers() const override { return world_.UnreleasedBuffers(); }
  size_t EagerLimit() const override { return world_.EagerLimit(); }
  TransportStats Stats() const override { return world_.Stats(); }
  std::string Describe() const override;

  // The underlying rank of local rank `local` (in range).
  Rank WorldRank(Rank local) const { return members_[static_cast<size_t>(local)]; }

 private:
  SubgroupTransport(Transport& world, std::vector<Rank> members, Rank self)
      : world_(world), members_(std::move(members)), self_(self) {}
  Result<Rank> Map(Rank local, const char* what) const;

  Transport& world_;
  std::vector<Rank> members_;
  Rank self_;
};

}  // namespace chorus::gossip
