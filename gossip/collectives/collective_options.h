// Options of the collectives (all-reduce, broadcast, barrier) and their tag layout.
//
// Tag layout. Every collective call owns the tags
//   [tag_base, tag_base + kTagsPerCollective)
// and builds each message tag as tag_base + (phase << kTagPhaseShift) + step, where
// `phase` is one of CollectivePhase below and `step` (< 2^kTagPhaseShift) is the
// algorithm's step (ring step, halving round, ...). Collectives that may run at the
// same time (two buckets of the fusion engine, an all-reduce beside a broadcast)
// must use disjoint tag ranges: tag_base values at least kTagsPerCollective apart
// (the fusion engine gives bucket b the base options.tag_base + b * kTagsPerCollective).
// Messages with one (source, destination, tag) are matched in order, so segments
// of one step share a tag.
//
// Must not: name a transport implementation, allocate, or hold state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/status.h"
#include "gossip/transport/provider.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

inline constexpr int kTagPhaseShift = 16;
inline constexpr Tag kTagsPerCollective = Tag{1} << 20;  // 16 phases of 2^16 steps

// The phases of the tag layout (see the file comment).
enum class CollectivePhase : uint32_t {
  kHello = 0,               // one empty message to every member: "I joined"
  kRingReduceScatter = 1,   // step = ring step
  kRingAllGather = 2,       // step = ring step
  kTreeReduce = 3,          // step = tree index (0 or 1 of a double tree)
  kTreeBroadcast = 4,       // step = tree index
  kFoldIn = 5,              // halving-doubling, recursive doubling: extra rank -> partner
  kHalving = 6,             // step = halving round
  kDoubling = 7,            // step = doubling round
  kFoldOut = 8,             // halving-doubling, recursive doubling: partner -> extra rank
  kBarrier = 9,             // step = dissemination round
  kRecursiveDoubling = 10,  // step = recursive doubling round
  kSegmentAttach = 11,      // step 0: segment name, leader -> member; step 1: the answer
  kAuditScatter = 12,       // audited all-reduce: each member's chunk to the rank that sums it
  kAuditGather = 13,        // audited all-reduce: each summed chunk to every rank
  kDirectGather = 14,       // Collective::Allgather: each rank's part, from it, to every rank
  kEchoGather = 15,         // Collective::AgreedAllgather: each rank's copy of every part, to every rank
};

inline Tag CollectiveTag(Tag base, CollectivePhase phase, uint32_t step = 0) {
  return base + (Tag{static_cast<uint32_t>(phase)} << kTagPhaseShift) + step;
}

enum class AllreduceAlgorithm {
  kAuto,                // chosen per call by ChooseAllreduceAlgorithm (allreduce_auto.h)
  kRing,                // reduce-scatter + all-gather around a ring: bandwidth-optimal
  kTree,                // reduce up a (double) binary tree, broadcast down: log latency
  kHalvingDoubling,     // recursive halving + doubling with the non-power-of-two fold
  kHierarchical,        // reduce inside each host, ring among host leaders, broadcast
  kRecursiveDoubling,   // log2 n whole-buffer exchanges with the fold: small buffers
  kSharedMemory,        // every rank on one host: through a shared segment, no messages
};

// The one spelling of each algorithm: in configs, `chorus bench allreduce`,
// traces and logs.
inline constexpr EnumName<AllreduceAlgorithm> kAllreduceAlgorithmNames[] = {
    {AllreduceAlgorithm::kAuto, "auto"},
    {AllreduceAlgorithm::kRing, "ring"},
    {AllreduceAlgorithm::kTree, "tree"},
    {AllreduceAlgorithm::kHalvingDoubling, "halving-doubling"},
    {AllreduceAlgorithm::kRecursiveDoubling, "recursive-doubling"},
    {AllreduceAlgorithm::kHierarchical, "hierarchical"},
    {AllreduceAlgorithm::kSharedMemory, "shared-memory"},
};

inline std::string_view AllreduceAlgorithmName(AllreduceAlgorithm algorithm) {
  return NameOf(kAllreduceAlgorithmNames, algorithm);
}
// One of kAllreduceAlgorithmNames; an error names the value and lists them.
Result<AllreduceAlgorithm> ParseAllreduceAlgorithm(std::string_view text);

// Crossovers used by kAuto: which algorithm wins at which buffer size. The
// defaults come from 4 ranks over tcp;ofi_rxm and shm on a 2-core host, rounded
// to where the winner changed in both providers; 2 ranks follow the same table
// (halving-doubling and the ring are the same two exchanges there). The tree
// lost everywhere at 4 ranks, so kAuto does not pick it by default (over net it
// does for large buffers: CrossoversForProvider).
// Measured table: docs/performance.md ("2026-11-22: the default table").
// Sizes are bytes of the whole buffer.
struct AllreduceCrossovers {
  // With more ranks than cores on one host, up to this size the tree (one
  // binary tree: 2 (n-1) messages) when it sends fewer messages than recursive
  // doubling (4 ranks or more). There every message's kernel work competes for
  // the same cores, so the time follows the number of messages, not of rounds.
  // 0 (never) by default: over shm recursive doubling stayed faster; see
  // CrossoversForProvider for tcp.
  size_t small_tree_max_bytes = 0;
  // Up to this size the fewest message rounds win: recursive doubling (log2 n
  // whole-buffer exchanges), for any world size.
  size_t recursive_doubling_max_bytes = 16 * 1024;
  // Up to this size (above recursive_doubling_max_bytes) the double binary
  // tree (2 log2 n hops); 0: never.
  size_t tree_max_bytes = 0;
  // From this size up to halving_doubling_max_bytes recursive halving-doubling
  // (2 log2 n rounds, 2 (n-1)/n of the data per rank); the ring elsewhere.
  size_t halving_doubling_min_bytes = 16 * 1024;
  size_t halving_doubling_max_bytes = 2 * 1024 * 1024;
  // Above halving_doubling_max_bytes, from this size on the double binary tree
  // instead of the ring; SIZE_MAX: never (see CrossoversForProvider).
  size_t large_tree_min_bytes = SIZE_MAX;
  // When ranks share hosts (some host key repeats) and there is more than one
  // host, buffers of at least this size go hierarchical.
  size_t hierarchical_min_bytes = 64 * 1024;
};

// The crossovers for a data-plane provider: the defaults above, except
// - net (tcp's native RDM endpoint): the double binary tree above 2 MiB
//   (large_tree_min_bytes), where it beat halving-doubling and the ring at 2 and
//   4 ranks; halving-doubling stays at 1 MiB;
// - tcp;ofi_rxm: recursive doubling up to 256 KiB (the tree did not win there),
//   halving-doubling from there to 2 MiB;
// - net with more ranks than cores: one binary tree up to 64 KiB
//   (small_tree_max_bytes), since the time follows the number of messages all
//   ranks send; tcp;ofi_rxm: the tree (two above 64 KiB) up to 4 MiB, where it
//   won or tied at 4 ranks on 2 cores;
// - shm keeps the defaults.
// Measurements: docs/performance.md ("2026-11-23: net's large buffers and rxm's
// recursive doubling", "2026-11-24: more ranks than cores (the small tree)",
// "2026-11-30: auto in rxm's eager mode").
AllreduceCrossovers CrossoversForProvider(FabricProvider provider);

// AllreduceOptions::segment_bytes when it is 0: 512 KiB for 2 ranks, and for
// more when `oversubscribed` (Oversubscribed in allreduce_auto.h: one host,
// more ranks than cores) unless `algorithm` is the tree; else 256 KiB.
// - 2 ranks: every step is one pairwise exchange, so each segment pays its own
//   message overhead (over tcp;ofi_rxm a rendezvous) with nothing else in
//   flight to hide it.
// - More ranks than cores: every message's kernel work competes for the same
//   cores, so half the messages beat deeper overlap. The tree pipelines its
//   segments down 2 log2 n hops and keeps 256 KiB.
// - Otherwise (a core per rank, or several hosts) the 256 KiB segments overlap;
//   512 KiB was not measured there.
// - 2 ranks, a buffer of kRendezvousSegmentsFrom or more, and a transport
//   whose eager limit (Transport::EagerLimit: tcp;ofi_rxm) lets the segment
//   above through with less than kRendezvousSlack to spare
//   (`fabric.rxm_eager_kib = 516`): segments one page above the limit, so
//   that each goes by rendezvous, which won there (eager transfers win
//   below it). Segments much larger than the default lost more to the
//   pipelining than the rendezvous gained, so a larger limit (the default
//   1 MiB) keeps them eager.
// Measurements: docs/performance.md ("2026-11-24: segment sizes", "2026-12-02:
// rendezvous segments for large buffers").
inline constexpr size_t kRendezvousSegmentsFrom = size_t{4} << 20;
inline constexpr size_t kRendezvousSlack = size_t{16} << 10;
size_t DefaultSegmentBytes(int world_size, bool oversubscribed = false,
                           AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing, size_t buffer_bytes = 0,
                           size_t eager_limit = 0);

// Broadcast and barrier.
struct CollectiveOptions {
  // First tag of this call's range (see the file comment).
  Tag tag_base = 0;
  // Every wait of the call ends by then; a silent peer gives kDeadlineExceeded.
  // Default: 60 s after the options object is constructed.
  Deadline deadline = Deadline::AfterSeconds(60);
  // Broadcast pipelining: the buffer moves in segments of this many bytes (>= 1).
  size_t segment_bytes = 256 * 1024;
  // Receives posted ahead per peer (>= 1).
  int inflight_segments = 4;
  // Every member sends an empty message to every other at the start, so that a
  // failure can name the ranks that never joined the call. Costs n-1 tiny
  // messages each way per call.
  bool identify_missing_peers = true;
};

struct AllreduceOptions {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  // Pipelining: data moves in segments of `segment_bytes` whatever the element
  // type (segments of a fixed element count would send float16 buffers in twice
  // float32's messages; docs/performance.md, "2026-11-23: FP16 buffers"), or of
  // `segment_elems` elements when that is set (> 0: small values let tests hit
  // the edge cases). Large segments cut per-message overhead. 0:
  // DefaultSegmentBytes(world size, whether the ranks oversubscribe their
  // host, the algorithm `auto` or the caller picked).
  size_t segment_bytes = 0;
  size_t segment_elems = 0;
  // Receives posted ahead per peer (>= 1), each into its own segment of scratch.
  int inflight_segments = 4;
  // First tag of this call's range (see the file comment).
  Tag tag_base = 0;
  // Every wait of the call ends by then; a silent peer gives kDeadlineExceeded,
  // a peer known dead kUnavailable, both naming it. Default: 60 s after the
  // options object is constructed.
  Deadline deadline = Deadline::AfterSeconds(60);
  // Each rank multiplies its input by pre_scale before the sum (e.g. 1/n for FP16
  // so that partial sums stay in range), and the result by post_scale after it.
  float pre_scale = 1.0f;
  float post_scale = 1.0f;
  // kTree: buffers up to this size go up and down one binary tree (2 (n-1)
  // messages); larger ones over two trees each carrying half of the buffer, so
  // that every rank's links carry data both ways (NCCL's double binary tree,
  // twice the messages). 0: always two trees; SIZE_MAX: always one. One tree
  // won up to 64 KiB at 4 ranks; above, the second tree's halved link load is
  // expected to pay on a real network. Measured: docs/performance.md ("2026-11-24:
  // more ranks than cores (the small tree)").
  size_t single_tree_max_bytes = 64 * 1024;
  // See CollectiveOptions::identify_missing_peers.
  bool identify_missing_peers = true;
  // Used by kAuto.
  AllreduceCrossovers crossovers;
};

}  // namespace chorus::gossip
