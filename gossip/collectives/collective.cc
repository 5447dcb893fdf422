// Collective (see collective.h): algorithm choice, broadcast, all-gather and barrier.
#include "gossip/collectives/collective.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>

#include "gossip/collectives/allreduce_auto.h"
#include "gossip/collectives/allreduce_halving_doubling.h"
#include "gossip/collectives/allreduce_hierarchical.h"
#include "gossip/collectives/allreduce_recursive_doubling.h"
#include "gossip/collectives/allreduce_shared_memory.h"
#include "gossip/collectives/allreduce_ring.h"
#include "gossip/collectives/allreduce_tree.h"
#include "gossip/collectives/collective_internal.h"

namespace chorus::gossip {

int HostCores() { return static_cast<int>(std::thread::hardware_concurrency()); }

Result<Collective> Collective::Create(Transport& transport, std::vector<std::string> host_keys,
                                      std::optional<HostSegmentOptions> shared_memory,
                                      std::vector<std::string> site_keys) {
  CHORUS_ASSIGN_OR_RETURN(CollectiveGroup world, CollectiveGroup::World(transport));
  if (host_keys.empty()) {
    for (int r = 0; r < world.size(); ++r) host_keys.push_back("rank" + std::to_string(r));
  }
  if (static_cast<int>(host_keys.size()) != world.size()) {
    return Err(InvalidArgument("collective: " + std::to_string(host_keys.size()) +
                               " host keys for " + std::to_string(world.size()) + " ranks"));
  }
  CHORUS_ASSIGN_OR_RETURN(topologies::HostGroups hosts, topologies::GroupByHost(host_keys));
  std::vector<int> order(static_cast<size_t>(world.size()));
  std::iota(order.begin(), order.end(), 0);
  if (!site_keys.empty()) {
    if (site_keys.size() != host_keys.size()) {
      return Err(InvalidArgument("collective: " + std::to_string(site_keys.size()) + " site keys for " +
                                 std::to_string(world.size()) + " ranks"));
    }
    CHORUS_ASSIGN_OR_RETURN(order, topologies::LinkAwareOrder(site_keys, host_keys));
  }
  CHORUS_ASSIGN_OR_RETURN(CollectiveGroup ring, world.Sub(order));
  std::vector<std::string> ring_host_keys;
  for (int r : order) ring_host_keys.push_back(host_keys[static_cast<size_t>(r)]);
  CHORUS_ASSIGN_OR_RETURN(topologies::HostGroups ring_hosts, topologies::GroupByHost(ring_host_keys));
  std::shared_ptr<HostSegment> segment;
  const auto& members = hosts.members[hosts.group_of_rank[world.self()]];
  if (shared_memory && members.size() > 1) {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup local, world.Sub(members));
    HostSegmentOptions o = *shared_memory;
    o.tag_base = CollectiveTag(o.tag_base, CollectivePhase::kSegmentAttach);
    CHORUS_ASSIGN_OR_RETURN(segment, HostSegment::Attach(local, o));
  }
  return Collective(std::move(world), std::move(hosts), std::move(ring), std::move(ring_hosts), std::move(segment),
                    HostCores());
}

Result<Collective> Collective::Subgroup(const std::vector<Rank>& ranks) const {
  std::vector<int> indices;
  std::vector<std::string> keys;
  for (Rank r : ranks) {
    const int i = world_.IndexOf(r);
    if (i < 0) return Err(InvalidArgument("collective subgroup: rank " + std::to_string(r) + " is not a member"));
    indices.push_back(i);
    keys.push_back(hosts_.host_keys[static_cast<size_t>(hosts_.group_of_rank[static_cast<size_t>(i)])]);
  }
  CHORUS_ASSIGN_OR_RETURN(CollectiveGroup group, world_.Sub(indices));
  CHORUS_ASSIGN_OR_RETURN(topologies::HostGroups hosts, topologies::GroupByHost(keys));
  return Collective(group, hosts, group, hosts, nullptr, host_cores_);
}

std::vector<Rank> Collective::RingOrder() const {
  std::vector<Rank> order;
  for (int i = 0; i < ring_.size(); ++i) order.push_back(ring_.RankAt(i));
  return order;
}

bool Collective::Oversubscribed() const {
  return gossip::Oversubscribed(size(), hosts_.NumGroups(), host_cores_);
}

AllreduceAlgorithm Collective::Resolve(const AllreduceOptions& options, size_t bytes) const {
  if (options.algorithm != AllreduceAlgorithm::kAuto) return options.algorithm;
  return ChooseAllreduceAlgorithm(bytes, size(), hosts_.NumGroups(), options.crossovers,
                                  segment_ != nullptr, host_cores_);
}

namespace {

// `options` with segment_elems set (where the caller left it 0) for `data`:
// options.segment_bytes, else the default for `algorithm` on `c` (its size,
// its host, its transport's eager limit) and the buffer's size.
template <typename T>
AllreduceOptions WithSegments(const Collective& c, AllreduceOptions options, AllreduceAlgorithm algorithm,
                              std::span<const T> data) {
  if (options.segment_elems == 0) {
    const size_t bytes = options.segment_bytes > 0
                             ? options.segment_bytes
                             : DefaultSegmentBytes(c.size(), c.Oversubscribed(), algorithm, data.size_bytes(),
                                                   c.transport().EagerLimit());
    options.segment_elems = std::max<size_t>(bytes / sizeof(T), 1);
  }
  return options;
}

}  // namespace

template <typename T>
Status Collective::AllreduceImpl(std::span<T> data, const AllreduceOptions& given) const {
  const AllreduceAlgorithm algorithm = Resolve(given, data.size_bytes());
  const AllreduceOptions options = WithSegments<T>(*this, given, algorithm, data);
  switch (algorithm) {
    case AllreduceAlgorithm::kRing: return AllreduceRing(ring_, data, options);
    case AllreduceAlgorithm::kTree: return AllreduceTree(world_, data, options);
    case AllreduceAlgorithm::kHalvingDoubling:
      return AllreduceHalvingDoubling(world_, data, options);
    case AllreduceAlgorithm::kHierarchical:
      return AllreduceHierarchical(ring_, ring_hosts_, data, options, segment_.get());
    case AllreduceAlgorithm::kRecursiveDoubling:
      return AllreduceRecursiveDoubling(world_, data, options);
    case AllreduceAlgorithm::kSharedMemory:
      // Alone: nothing to share (no segment is attached); the ring only scales.
      if (size() == 1) return AllreduceRing(world_, data, options);
      if (segment_ == nullptr || hosts_.NumGroups() != 1) {
        return FailedPrecondition(
            "shared-memory all-reduce needs every rank on one host and a collective created with "
            "shared memory (" + std::to_string(hosts_.NumGroups()) + " hosts, segment " +
            (segment_ != nullptr ? "attached" : "not attached") + ")");
      }
      return AllreduceSharedMemory(*segment_, data, options);
    case AllreduceAlgorithm::kAuto: break;
  }
  return Internal("collective: no algorithm resolved");
}

Status Collective::Allreduce(std::span<float> data, const AllreduceOptions& options) const {
  return AllreduceImpl(data, options);
}

Status Collective::Allreduce(std::span<uint16_t> half, const AllreduceOptions& options) const {
  return AllreduceImpl(half, options);
}

// The audit's segments are the ring's: the same bytes per rank.
Status Collective::AuditedAllreduce(std::span<float> data, const AllreduceOptions& options,
                                    AuditFigures* figures) const {
  return AllreduceAudited(world_, data,
                          WithSegments<float>(*this, options, AllreduceAlgorithm::kRing, data), figures);
}

Status Collective::AuditedAllreduce(std::span<uint16_t> half, const AllreduceOptions& options,
                                    AuditFigures* figures) const {
  return AllreduceAudited(world_, half,
                          WithSegments<uint16_t>(*this, options, AllreduceAlgorithm::kRing, half), figures);
}

Status Collective::Broadcast(std::span<std::byte> data, Rank root,
                             const CollectiveOptions& options) const {
  const int root_index = world_.IndexOf(root);
  if (root_index < 0) {
    return InvalidArgument("broadcast: root rank " + std::to_string(root) + " is not one of the " +
                           std::to_string(size()) + " members");
  }
  if (options.segment_bytes == 0 || options.inflight_segments < 1) {
    return InvalidArgument("broadcast: segment_bytes and inflight_segments must be >= 1");
  }
  const detail::TreeParams params{options.segment_bytes, options.inflight_segments,
                                  options.tag_base, options.deadline};
  return detail::RunCollective(
      world_, options.tag_base, options.deadline, options.identify_missing_peers,
      "broadcast from rank " + std::to_string(root),
      [&] { return detail::TreeBroadcastFrom(world_, data, root_index, params); });
}

namespace {

// Floats per message segment of a gather.
size_t SegmentFloats(const CollectiveOptions& options) {
  return std::max<size_t>(1, options.segment_bytes / sizeof(float));
}

// One direct round of an all-gather of `all`'s k-float parts; `bend` as
// Collective::PartFor says (may be null).
Status DirectGatherRound(const CollectiveGroup& world, std::span<float> all, size_t k,
                         const CollectiveOptions& options, const Collective::PartFor& bend) {
  const int n = world.size();
  const int self = world.self();
  auto part = [&](int r) { return all.subspan(static_cast<size_t>(r) * k, k); };
  std::vector<std::vector<float>> bent;  // what `bend` made of this rank's part, by destination
  std::function<std::span<const float>(int)> outgoing;
  if (bend) {
    bent.resize(static_cast<size_t>(n));
    for (int d = 0; d < n; ++d) {
      bent[d].assign(part(self).begin(), part(self).end());
      if (d != self) bend(d, std::span<float>(bent[d]));
    }
    outgoing = [&](int d) { return std::span<const float>(bent[d]); };
  }
  return detail::DirectAllgather<float>(world, CollectiveTag(options.tag_base, CollectivePhase::kDirectGather), part,
                                        SegmentFloats(options), options.inflight_segments, options.deadline,
                                        "all-gather", nullptr, outgoing);
}

// The parts' size, or InvalidArgument naming `what`.
Result<size_t> PartSize(std::span<float> all, int n, const std::string& what) {
  if (all.size() % static_cast<size_t>(n) != 0) {
    return Err(InvalidArgument(what + ": " + std::to_string(all.size()) + " floats do not split into " +
                               std::to_string(n) + " equal parts"));
  }
  return all.size() / static_cast<size_t>(n);
}

// The agreed gather's second round: every rank sends every other its copy
// of all of `table` (as the first round left it) and gets theirs, each
// rank's at r * |table| in `*echoes`.
Status EchoRound(const CollectiveGroup& world, std::span<const float> table, const CollectiveOptions& options,
                 std::vector<float>* echoes) {
  const int n = world.size();
  const size_t size = table.size();
  echoes->assign(static_cast<size_t>(n) * size, 0.0f);
  auto echo = [&](int r) { return std::span<float>(*echoes).subspan(static_cast<size_t>(r) * size, size); };
  std::copy(table.begin(), table.end(), echo(world.self()).begin());
  return detail::DirectAllgather<float>(world, CollectiveTag(options.tag_base, CollectivePhase::kEchoGather), echo,
                                        SegmentFloats(options), options.inflight_segments, options.deadline,
                                        "all-gather's echoes");
}

}  // namespace

Status Collective::Allgather(std::span<float> all, const CollectiveOptions& options, const PartFor& bend) const {
  CHORUS_ASSIGN_OR_RETURN(const size_t k, PartSize(all, size(), "all-gather"));
  if (size() < 2 || k == 0) return Status::Ok();
  return detail::RunCollective(world_, options.tag_base, options.deadline, options.identify_missing_peers,
                               "all-gather", [&] { return DirectGatherRound(world_, all, k, options, bend); });
}

Status Collective::AgreedAllgather(std::span<float> all, const CollectiveOptions& options,
                                   std::vector<int>* equivocators, const PartFor& bend,
                                   const PartSigner* signer) const {
  const int n = size();
  const int self = rank();
  if (equivocators != nullptr) equivocators->clear();
  CHORUS_ASSIGN_OR_RETURN(const size_t k, PartSize(all, n, "agreed all-gather"));
  if (n < 2 || k == 0) return Status::Ok();
  if (signer != nullptr && n >= kMinRanksForSignedAgreement) {
    return SignedAgreedAllgather(all, k, options, equivocators, bend, *signer);
  }
  // The second round's parts: each rank's whole table as it received it.
  std::vector<float> echoes;
  CHORUS_RETURN_IF_ERROR(detail::RunCollective(
      world_, options.tag_base, options.deadline, options.identify_missing_peers, "agreed all-gather", [&]() -> Status {
        CHORUS_RETURN_IF_ERROR(DirectGatherRound(world_, all, k, options, bend));
        if (n < kMinRanksForAgreement) return Status::Ok();
        return EchoRound(world_, all, options, &echoes);
      }));
  if (n < kMinRanksForAgreement) return Status::Ok();
  std::vector<int> liars = detail::ResolveByMajority(all, echoes, n, self);
  if (equivocators != nullptr) *equivocators = std::move(liars);
  return Status::Ok();
}

// AgreedAllgather with every part signed by its sender: each part travels
// with its signature (g floats after its k), in both rounds, and each rank
// takes for every other the one part its valid signatures cover
// (detail::ResolveBySignature).
Status Collective::SignedAgreedAllgather(std::span<float> all, size_t k, const CollectiveOptions& options,
                                         std::vector<int>* equivocators, const PartFor& bend,
                                         const PartSigner& signer) const {
  const int n = size();
  const int self = rank();
  const size_t g = signer.SignatureFloats();
  const size_t w = k + g;
  std::vector<float> table(static_cast<size_t>(n) * w, 0.0f);
  const std::span<float> own = std::span<float>(table).subspan(static_cast<size_t>(self) * w, w);
  const std::span<const float> mine = all.subspan(static_cast<size_t>(self) * k, k);
  std::copy(mine.begin(), mine.end(), own.begin());
  signer.Sign(options.tag_base, own.first(k), own.subspan(k, g));
  // A bent part is signed as sent: a liar holds its own key.
  PartFor signed_bend;
  if (bend) {
    signed_bend = [&](int dest, std::span<float> part) {
      bend(dest, part.first(k));
      signer.Sign(options.tag_base, part.first(k), part.subspan(k, g));
    };
  }
  std::vector<float> echoes;
  CHORUS_RETURN_IF_ERROR(detail::RunCollective(
      world_, options.tag_base, options.deadline, options.identify_missing_peers, "agreed all-gather", [&]() -> Status {
        CHORUS_RETURN_IF_ERROR(DirectGatherRound(world_, table, w, options, signed_bend));
        return EchoRound(world_, table, options, &echoes);
      }));
  auto valid = [&](int sender, std::span<const float> part, std::span<const float> signature) {
    return signer.Verify(world_.RankAt(sender), options.tag_base, part, signature);
  };
  std::vector<int> liars = detail::ResolveBySignature(table, echoes, n, self, k, valid);
  for (int r = 0; r < n; ++r) {
    const auto from = table.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * w);
    std::copy(from, from + static_cast<std::ptrdiff_t>(k), all.begin() + static_cast<std::ptrdiff_t>(r * k));
  }
  if (equivocators != nullptr) *equivocators = std::move(liars);
  return Status::Ok();
}

// Dissemination barrier: in round k rank i signals i + 2^k and waits for i - 2^k;
// after ceil(log2 n) rounds every rank has heard, through some chain, from all.
Status Collective::Barrier(const CollectiveOptions& options) const {
  const int n = size();
  const int i = rank();
  auto rounds = [&]() -> Status {
    std::vector<RequestPtr> sends;
    uint32_t round = 0;
    for (int dist = 1; dist < n; dist *= 2, ++round) {
      const Tag tag = CollectiveTag(options.tag_base, CollectivePhase::kBarrier, round);
      auto send = transport().Isend(world_.RankAt((i + dist) % n), tag, {});
      if (!send) return send.error().WithContext("barrier round " + std::to_string(round));
      sends.push_back(std::move(*send));
      auto got = transport().Recv(world_.RankAt((i - dist + n) % n), tag, {}, options.deadline);
      if (!got) return got.error().WithContext("barrier round " + std::to_string(round));
    }
    return WaitAll(sends, options.deadline);
  };
  return detail::RunCollective(world_, options.tag_base, options.deadline,
                               options.identify_missing_peers, "barrier", rounds);
}

}  // namespace chorus::gossip
