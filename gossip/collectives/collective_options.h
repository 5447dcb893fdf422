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

// Crossovers used by kAuto, from `chorus bench allreduce --ranks 4` on this
// 2-core machine (tcp;ofi_rxm and shm, float32, 2026-11-22, after receive
// scratch was pooled and rxm's SAR protocol turned off; noisy, so rounded to
// where the winner changed in both providers). Microseconds, tcp / shm:
//   4 KiB:  recursive doubling 93 / 25, halving-doubling 153 / 32, tree 123 / 40
//   16 KiB: recursive doubling 102 / 70, halving-doubling 176 / 51, tree 165 / 82
//   64 KiB: halving-doubling 366 / 105, recursive doubling 339 / 147, ring 465 / 128
//   1 MiB:  halving-doubling 1921 / 957, ring 2003 / 1113, tree 3916 / 2623
//   4 MiB:  ring 9243 / 4616, halving-doubling 11342 / 4953
// At 2 ranks recursive doubling beat the ring at 4-16 KiB (tcp 16-22 vs 53-63,
// shm 5 vs 16-17). Above, halving-doubling and the ring (the same two exchanges
// of halves at 2 ranks) tied from 16 KiB to 256 KiB and at 4 MiB, and
// halving-doubling won at 1 MiB in every run (2 ranks, 2026-11-22, medians of 3
// alternated rounds, us, shm / tcp: 392 vs 402 / 616 vs 683; compare_peers.sh
// allreduce RANKS=2: 309 vs 369 / 606 vs 705), so 2 ranks follow the same table.
// The tree lost everywhere at 4 ranks, so kAuto does not pick it by default
// (over net it does for large buffers: CrossoversForProvider). Re-measured at 4
// ranks the same day (3 rounds, a host with 20-45% steal): the winners changed
// where the table says.
// Sizes are bytes of the whole buffer.
struct AllreduceCrossovers {
  // With more ranks than cores on one host, up to this size the tree (one
  // binary tree: 2 (n-1) messages) when it sends fewer messages than recursive
  // doubling (4 ranks or more). There every message's kernel work competes for
  // the same cores, so the time follows the number of messages, not of rounds.
  // 0 (never) by default: over shm recursive doubling stayed faster (4 ranks,
  // 4 KiB: 17.7 us against the tree's 24.2); see CrossoversForProvider for tcp.
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

// The crossovers for a data-plane provider: the defaults above, and over net
// (tcp's native RDM endpoint) the double binary tree above 2 MiB. Measured on a
// 2-core EPYC host (2026-11-23, `chorus bench allreduce --provider net`, float32,
// us, 3 alternated runs at 4 ranks, 2 at 2 ranks):
//   4 ranks  4 MiB: tree 4166-5391, halving-doubling 5763-7537, ring 8047-8144
//           16 MiB: tree 17107-21283, halving-doubling 24267-31067, ring 25423-31530
//           64 MiB: tree 57498-81245, halving-doubling 89358-119073, ring 92507-124996
//            1 MiB: halving-doubling 764-900, tree 809-1094 (halving-doubling stays)
//   2 ranks 16 MiB: tree 3987-5842, halving-doubling 6312-6870, ring 7033-8157
// Over tcp;ofi_rxm the tree did not win (16 MiB, 4 ranks: 19281-29669 against
// the ring's 19651-26737), but recursive doubling did up to 256 KiB (fitted by
// `chorus bench allreduce --fit-crossovers --provider 'tcp;ofi_rxm'` in 3 runs,
// 2026-11-23; float32 us, recursive doubling against halving-doubling):
//   2 ranks  64 KiB: 44-46 against 76-96;   256 KiB: 68-71 against 101-138
//   4 ranks  64 KiB: 257-268 against 273-304; 256 KiB: 374-463 against 465-513
// With more ranks than cores (4 ranks on the 2 cores, 2026-11-24, `chorus bench
// allreduce --ranks 4 --max-size 1MiB --fit-crossovers`, float32 us, one
// binary tree against recursive doubling / halving-doubling), the tree up to
// 64 KiB over net and 16 KiB over tcp;ofi_rxm (small_tree_max_bytes):
//   net          4 KiB: 54 against 103 / 148;  16 KiB: 77 against 170 / 175;
//               64 KiB: 165 against 383 / 237; 256 KiB (two trees): 659 against 1103 / 650
//   tcp;ofi_rxm  4 KiB: 64 against 111 / 154;  16 KiB: 92 against 141 / 160;
//               64 KiB: 464 against 382 / 402
// The message count held at other world sizes (net, 2 runs each): 8 ranks (14
// messages against 24) 4 KiB 162-181 against 269-300, 64 KiB 556-591 against
// 819-1083 / 637-669; 3 ranks (4 against 4) a tie, 4 KiB 32-34 against 31-33.
// shm keeps the defaults.
AllreduceCrossovers CrossoversForProvider(FabricProvider provider);

// AllreduceOptions::segment_bytes when it is 0: 512 KiB for 2 ranks, and for
// more when `oversubscribed` (Oversubscribed in allreduce_auto.h: one host,
// more ranks than cores) unless `algorithm` is the tree; else 256 KiB.
// - 2 ranks: every step is one pairwise exchange, so each segment pays its own
//   message overhead (over tcp;ofi_rxm a rendezvous) with nothing else in
//   flight to hide it. Measured on the 2-core EPYC host, `chorus bench
//   allreduce --ranks 2 --algorithms halving_doubling --quick`, 5 alternations,
//   medians: at 1 MiB rxm 361 -> 296 us, net 224 -> 222; at 16 MiB rxm 7.6 ->
//   7.0 ms, net 8.0 -> 7.1.
// - More ranks than cores: every message's kernel work competes for the same
//   cores, so half the messages beat deeper overlap. 4 ranks on the 2 cores,
//   2026-11-24, median of the per-round ratios 256 KiB time / 512 KiB time over
//   alternated rounds (`auto` unless named): 1 MiB rxm 1.17 (16 rounds), net
//   1.14 (12); 16 MiB rxm 1.12 (6), net 0.97 (6); 8 ranks 1 MiB rxm 1.15 (8).
//   shm was even (halving-doubling 1 MiB 0.94, ring 16 MiB 1.04: its messages
//   cost no system calls). The tree pipelines its segments down 2 log2 n hops
//   and keeps 256 KiB: over net at 16 MiB 512 KiB made it slower (0.91, 8
//   rounds; 0.76 in an earlier session).
// - Otherwise (a core per rank, or several hosts) the 256 KiB segments overlap
//   and nothing above was measured.
size_t DefaultSegmentBytes(int world_size, bool oversubscribed = false,
                           AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing);

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
  // type (float16 buffers took 1.2-1.7x float32's time at 1 MiB over net with
  // segments of a fixed element count: twice the messages), or of
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
  // twice the messages). 0: always two trees; SIZE_MAX: always one. Measured at
  // 4 ranks on the 2-core EPYC host (float32, us, one tree against two): net
  // 4 KiB 50 / 90, 64 KiB 124 / 156, 256 KiB 281 / 367; tcp;ofi_rxm 4 KiB
  // 77 / 122, 64 KiB 406 / 415, 256 KiB 687 / 638. Above 64 KiB the second
  // tree's halved link load starts to pay on a real network.
  size_t single_tree_max_bytes = 64 * 1024;
  // See CollectiveOptions::identify_missing_peers.
  bool identify_missing_peers = true;
  // Used by kAuto.
  AllreduceCrossovers crossovers;
};

}  // namespace chorus::gossip
