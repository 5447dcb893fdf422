// Consensus phase: make the replicas agree at the end of training, and measure
// how far apart they are.
//
// Consensus distance: max_i ||x_i - x_mean|| / ||x_mean|| over the ranks of a
// Collective (absolute max_i ||x_i - x_mean|| when x_mean is 0). Computed exactly
// with two all-reduces: the sum of the vectors (post-scaled by 1/n: x_mean), then
// a small one of n floats where rank i contributes ||x_i - x_mean|| at index i
// (a max from a sum-only all-reduce: the other entries are 0, so each sum is exact).
//
// Methods:
//  - kAllreduceAverage: one exact all-reduce average; every replica takes x_mean.
//    The all-reduce algorithms reduce each chunk once and copy the result, so all
//    ranks get the same bytes; this is verified: each rank's WeightsChecksum of
//    its bytes goes through a small all-reduce (16-bit pieces, exact in float) and
//    is compared. On a mismatch rank 0's bytes are broadcast (the report says so)
//    and checked again. distance_after is then 0.
//  - kGossip: rounds of D-PSGD with Metropolis-Hastings weights over `graph` (a
//    complete graph when none is given: one round is then the exact average up to
//    rounding) until the measured distance is <= bound, measuring every
//    check_every rounds, at most max_rounds rounds. Replicas end close, not equal.
//
// Tags: every collective call here uses GossipCollectiveTagBase(tag_stream, epoch,
// k) for k = 0, 1, ... in call order, and the D-PSGD rounds use tag_stream too
// (gossip_tags.h); the default stream 255 keeps them apart from the protocols'.
//
// Must not: keep state between calls or use a transport beyond the Collective's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective.h"
#include "topologies/graph.h"

namespace chorus::gossip {

enum class ConsensusMethod {
  kAllreduceAverage,  // one exact all-reduce average; replicas bitwise identical
  kGossip,            // D-PSGD rounds until the distance is under the bound
};

struct ConsensusOptions {
  ConsensusMethod method = ConsensusMethod::kAllreduceAverage;
  // kGossip: target relative distance (> 0).
  double bound = 1e-4;
  // kGossip: at most this many D-PSGD rounds (>= 0); the report says whether the
  // bound was reached.
  int64_t max_rounds = 10000;
  // kGossip: D-PSGD rounds between two measurements (>= 1). Each measurement is
  // an all-reduce of the whole vector, so this trades bytes against overshoot.
  int check_every = 10;
  // Algorithm, segment sizes... of every all-reduce here; tag_base, deadline,
  // pre_scale and post_scale are set by the consensus code.
  AllreduceOptions allreduce;
  // Tag stream and membership epoch (see the file comment).
  uint8_t tag_stream = 255;
  uint32_t epoch = 0;
  // Every wait of the phase ends by then.
  Deadline deadline = Deadline::AfterSeconds(300);
};

struct ConsensusReport {
  double distance_before = 0.0;
  double distance_after = 0.0;
  bool reached = false;       // distance_after <= bound (kGossip); true after an average
  int64_t gossip_rounds = 0;  // kGossip: D-PSGD rounds run
  int measurements = 0;       // exact distance measurements made
  bool identical = false;     // kAllreduceAverage: every rank has the same bytes (verified)
  bool repaired = false;      // kAllreduceAverage: bytes differed and rank 0's were broadcast
  uint64_t checksum = 0;      // WeightsChecksum of this rank's final bytes
};

// The exact consensus distance (file comment). Uses the tag ranges starting at
// tag_base and tag_base + kTagsPerCollective. When `mean` is not null it gets
// x_mean (same bytes on every rank); `distances`, when not null, holds the
// second all-reduce's buffer (a caller that must keep what a provider may
// still write into after a failed wait passes both).
Result<double> MeasureConsensusDistance(const Collective& world, std::span<const float> params,
                                        const AllreduceOptions& options, Tag tag_base,
                                        std::vector<float>* mean = nullptr,
                                        std::vector<float>* distances = nullptr);

// Runs the consensus phase on every rank of `world` (all with the same options and
// graph). `graph`: the kGossip graph over the world's ranks (undirected), or null
// for a complete graph; ignored by kAllreduceAverage.
Result<ConsensusReport> RunConsensus(const Collective& world, const topologies::Graph* graph,
                                     std::span<float> params, const ConsensusOptions& options);

}  // namespace chorus::gossip
