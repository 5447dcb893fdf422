// Tag layout of the gossip protocols and the consensus phase.
//
// Tags have 63 bits (transport.h: kMaxTag). Gossip owns every tag with bit 62
// set (kGossipTagBit); the collectives' tags (collective_options.h: tag_base +
// (phase << 16) + step, ranges of 2^20) must stay below 2^62, which every caller
// of Collective outside gossip/ does by using small tag_base values. A gossip tag is
//
//   bit 63       0 (not a tag bit: libfabric's net provider keeps it)
//   bit 62       1 (gossip)
//   bits 56..61  GossipMessageKind (6 bits)
//   bits 48..55  stream (8 bits): lets two protocol instances share a transport
//   bits 40..47  membership epoch mod 256: messages left over from a round that a
//                failure interrupted never match after SetTopology
//   bits 0..39   round mod 2^40 (point-to-point kinds), or, for the collective
//                calls gossip makes itself (consensus all-reduces, the pairwise
//                finish barrier), call_index * kTagsPerCollective: a tag_base for
//                collective_options.h's layout, 2^20 calls before it wraps.
//
// Must not: hold state or name a transport implementation.
#pragma once

#include <cstdint>

#include "gossip/collectives/collective_options.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

inline constexpr Tag kGossipTagBit = Tag{1} << 62;
inline constexpr int kGossipKindShift = 56;
inline constexpr int kGossipStreamShift = 48;
inline constexpr int kGossipEpochShift = 40;
inline constexpr Tag kGossipRoundMask = (Tag{1} << kGossipEpochShift) - 1;

enum class GossipMessageKind : uint8_t {
  kDpsgd = 1,       // D-PSGD parameters (gossip_dpsgd.h)
  kPushSum = 2,     // push-sum shares (gossip_push_sum.h)
  kChoco = 3,       // CHOCO compressed differences (choco_gossip.h)
  kPairwise = 4,    // pairwise (pairwise_gossip.h): round field 0 requests and step notices, 1 answers, 2 values
  kCollective = 5,  // tag bases of collective calls made by gossip (consensus, barriers)
};
static_assert((Tag{0x3f} << kGossipKindShift) < kGossipTagBit, "kinds fit in bits 56..61");

inline Tag GossipPrefix(GossipMessageKind kind, uint8_t stream, uint32_t epoch) {
  return kGossipTagBit | (Tag{static_cast<uint8_t>(kind)} << kGossipKindShift) |
         (Tag{stream} << kGossipStreamShift) | (Tag{epoch & 0xffu} << kGossipEpochShift);
}

// Every gossip message of membership epoch `epoch` (mod 256), of any kind and
// stream: what Transport::Discard drops once the epoch has ended.
inline TagFilter GossipEpochFilter(uint32_t epoch) {
  constexpr Tag kEpochBits = Tag{0xff} << kGossipEpochShift;
  return {kGossipTagBit | (Tag{epoch & 0xffu} << kGossipEpochShift),
          kMaxTag & ~(kGossipTagBit | kEpochBits)};
}

// The tag of a point-to-point gossip message of `round`.
inline Tag GossipTag(GossipMessageKind kind, uint8_t stream, uint32_t epoch, int64_t round) {
  return GossipPrefix(kind, stream, epoch) | (static_cast<Tag>(round) & kGossipRoundMask);
}

// The streams in use: 0 the protocols (GossipOptions::tag_stream), 255 the
// consensus phase (ConsensusOptions::tag_stream), and these: the exact
// consensus distance that a node measures during training for the records,
// the one consensus control measures, the exact averages of Gossip-PGA, the
// gossip inside a site of a two-level exchange, and the exact consensus
// distance measured beside training (node/exchange/background_consensus_meter.h),
// the gradient sketches of LARS's peer or mean-gradient norm
// (node/exchange/peer_gradient_products.h, mean_sketch.h: one or the other).
inline constexpr uint8_t kDistanceTagStream = 254;
inline constexpr uint8_t kConsensusControlTagStream = 253;
inline constexpr uint8_t kGlobalAverageTagStream = 252;
inline constexpr uint8_t kSiteGossipTagStream = 251;
inline constexpr uint8_t kBackgroundDistanceTagStream = 250;
inline constexpr uint8_t kPeerSketchTagStream = 249;

// tag_base of the call_index-th collective call that gossip code makes on
// (stream, epoch); successive calls get disjoint ranges of kTagsPerCollective.
inline Tag GossipCollectiveTagBase(uint8_t stream, uint32_t epoch, uint64_t call_index) {
  constexpr uint64_t kCalls = (kGossipRoundMask + 1) / kTagsPerCollective;
  return GossipPrefix(GossipMessageKind::kCollective, stream, epoch) |
         ((call_index % kCalls) * kTagsPerCollective);
}

}  // namespace chorus::gossip
