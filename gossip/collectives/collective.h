// gossip/collectives/: the all-reduce algorithms and their shared machinery.
//
// Collective: the communicator that node/ and the fusion engine call for
// all-reduce, broadcast and barrier over every rank of a Transport.
//
// One Collective per membership epoch: it copies the transport's ranks at Create
// time (make a new one after SetPeers). Methods are const and may run at the same
// time from several threads when their calls use disjoint tag ranges
// (collective_options.h). The algorithms live in allreduce_*.h; this class only
// picks one and holds the host groups.
//
// Must not: see a transport implementation, own the transport, or keep per-call
// state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/collectives/allreduce_audited.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/collectives/host_segment.h"
#include "gossip/collectives/part_signer.h"
#include "gossip/transport/transport.h"
#include "topologies/host_groups.h"

namespace chorus::gossip {

// This host's online cores (not the process's affinity): the same in every
// process on the host, so ranks sharing one pick alike.
int HostCores();

class Collective {
 public:
  // `host_keys`: one per transport rank (e.g. host names), used by hierarchical
  // all-reduce and kAuto (with this host's core count when every rank is on
  // it); empty means every rank on its own host.
  // `shared_memory`: the ranks of each host (two or more) attach one
  // HostSegment (a collective call: every rank passes it or none does), used by
  // kSharedMemory, by hierarchical inside hosts, and so by kAuto.
  // `site_keys`: one per transport rank (cluster.site): the ring and
  // hierarchical all-reduce then run their ring in topologies::LinkAwareOrder,
  // so that it crosses each site's boundary twice, and each host's likewise,
  // whatever the ranks' order. Empty: the ring in rank order.
  static Result<Collective> Create(Transport& transport, std::vector<std::string> host_keys = {},
                                   std::optional<HostSegmentOptions> shared_memory = std::nullopt,
                                   std::vector<std::string> site_keys = {});

  // Sums `data` in place over all ranks (same length and options everywhere),
  // with options.pre_scale / post_scale. `half` holds IEEE binary16 bits, summed
  // in FP32 and rounded to FP16 after each addition.
  [[nodiscard]] Status Allreduce(std::span<float> data, const AllreduceOptions& options) const;
  [[nodiscard]] Status Allreduce(std::span<uint16_t> half, const AllreduceOptions& options) const;
  // The same sum, audited (allreduce_audited.h): each member's chunks go whole
  // to the rank that sums them, and `figures` says what this rank sent,
  // received and summed. options.algorithm is ignored.
  [[nodiscard]] Status AuditedAllreduce(std::span<float> data, const AllreduceOptions& options,
                                        AuditFigures* figures) const;
  [[nodiscard]] Status AuditedAllreduce(std::span<uint16_t> half, const AllreduceOptions& options,
                                        AuditFigures* figures) const;
  // Copies `root`'s `data` to every rank (same length everywhere); binary tree,
  // pipelined by options.segment_bytes. With identify_missing_peers the root too
  // returns only once every rank has joined.
  [[nodiscard]] Status Broadcast(std::span<std::byte> data, Rank root,
                                 const CollectiveOptions& options) const;
  // Every rank's part of `all` (k = all.size() / size() floats each; this
  // rank's at rank() * k, filled by the caller) on every rank. Direct: each
  // part travels in one message from its rank to each other, so no rank
  // passes on another's. An all-reduce of zero-padded parts would gather the
  // same values in fewer rounds, but its ranks forward each other's parts,
  // and one that alters what it forwards changes another member's figures in
  // some members' views only: what a member reports about itself must reach
  // every member as that member sent it. Errors name the rank that sent
  // nothing (n - 1 messages each way, no hello needed).
  // `bend`: what this rank sends `dest` in place of its own part (a copy it
  // may alter): fault injection for tests, a member that equivocates.
  using PartFor = std::function<void(int dest, std::span<float> part)>;
  [[nodiscard]] Status Allgather(std::span<float> all, const CollectiveOptions& options,
                                 const PartFor& bend = nullptr) const;
  // Allgather, then every rank sends every other its copy of every part, and
  // takes for each other rank's part the value that most of its n - 1 copies
  // (the one from that rank, one from each other rank) hold
  // (detail::ResolveByMajority): the oral-messages agreement of Lamport,
  // Shostak and Pease with one traitor. With n >= 4 and at most one member
  // lying, every honest rank ends with the same parts: an honest rank's part
  // as it sent it (its n - 2 honest copies outvote one lie), and a liar's as
  // the value most honest ranks got, or, where no value has a majority, NaN
  // in every float and the liar's rank in `equivocators` (ascending), on
  // every honest rank alike (they all hold the same copies of its part). An
  // honest member sends one part to all, so it is never among them. Below
  // kMinRanksForAgreement ranks no agreement without signatures tolerates a liar: a plain
  // Allgather, `equivocators` empty. Twice Allgather's messages, the second
  // n times the size.
  // With `signer` (part_signer.h), from kMinRanksForSignedAgreement ranks:
  // every part travels signed by its sender in both rounds, and a rank takes
  // for each other the one part that valid signatures of its sender cover
  // (detail::ResolveBySignature); a sender whose valid signatures cover two
  // parts, or none, gets NaN and is in `equivocators` on every honest rank
  // alike. A relayer cannot alter a part unnoticed, so three ranks suffice.
  static constexpr int kMinRanksForAgreement = 4;
  static constexpr int kMinRanksForSignedAgreement = 3;
  [[nodiscard]] Status AgreedAllgather(std::span<float> all, const CollectiveOptions& options,
                                       std::vector<int>* equivocators, const PartFor& bend = nullptr,
                                       const PartSigner* signer = nullptr) const;
  // Returns once every rank has entered it (dissemination barrier, ceil(log2 n) rounds).
  [[nodiscard]] Status Barrier(const CollectiveOptions& options) const;

  // The algorithm an Allreduce with `options` runs for a buffer of `bytes`
  // (options.algorithm unless it is kAuto).
  AllreduceAlgorithm Resolve(const AllreduceOptions& options, size_t bytes) const;

  Transport& transport() const { return world_.transport(); }
  int rank() const { return world_.self(); }
  int size() const { return world_.size(); }
  const topologies::HostGroups& hosts() const { return hosts_; }
  // The transport ranks in the order of the ring (LinkAwareOrder).
  std::vector<Rank> RingOrder() const;
  // A collective over `ranks` (distinct transport ranks of this one's,
  // this rank's among them), their index in it their position in `ranks`:
  // rank() and size() count in it, and Broadcast's root is a transport rank.
  // Their host keys come along; no shared-memory segment; the ring in the
  // given order. Every member creates it with the same list.
  Result<Collective> Subgroup(const std::vector<Rank>& ranks) const;
  // This rank's host segment; null without shared memory or alone on its host.
  HostSegment* segment() const { return segment_.get(); }
  // Every rank on this host and more of them than its cores (Oversubscribed in
  // allreduce_auto.h); the same answer on every rank.
  bool Oversubscribed() const;

 private:
  Status SignedAgreedAllgather(std::span<float> all, size_t k, const CollectiveOptions& options,
                               std::vector<int>* equivocators, const PartFor& bend,
                               const PartSigner& signer) const;
  Collective(CollectiveGroup world, topologies::HostGroups hosts, CollectiveGroup ring,
             topologies::HostGroups ring_hosts, std::shared_ptr<HostSegment> segment, int host_cores)
      : world_(std::move(world)), hosts_(std::move(hosts)), ring_(std::move(ring)),
        ring_hosts_(std::move(ring_hosts)), segment_(std::move(segment)), host_cores_(host_cores) {}

  template <typename T>
  Status AllreduceImpl(std::span<T> data, const AllreduceOptions& options) const;

  CollectiveGroup world_;
  topologies::HostGroups hosts_;
  // The world in link-aware order, and its host groups by index in it (the
  // same hosts and leaders as hosts_; members ascending inside each).
  CollectiveGroup ring_;
  topologies::HostGroups ring_hosts_;
  std::shared_ptr<HostSegment> segment_;  // shared: Collective is copied by value
  int host_cores_ = 0;  // HostCores(), for kAuto when every rank is on this host
};

}  // namespace chorus::gossip
