// AllreduceAudited: an all-reduce in which each member's contribution reaches
// the member that sums it whole, so that what a member sent can be measured
// by someone other than itself (node/exchange/poison_check.h, JudgeAudit).
//
// A direct reduce-scatter (rank j sends chunk k of its buffer to rank k, and
// rank k sums the chunks it receives into its own, in rank order) and a
// direct all-gather (rank k sends its summed chunk to every rank): the ring's
// bytes per rank, 2 (n-1)/n of the buffer, in n-1 messages at once per phase
// instead of n-1 hops in turn. Every rank measures, in the element values that
// travelled (FP16 widened to FP32), the sum of squares and finiteness of what
// it sent each rank and of what it received from each: a sender's figure of a
// message and its receiver's are of the same bytes in the same order, so they
// agree exactly unless one of the two misreports.
//
// Must not: see a transport implementation; be used where speed matters
// more than attribution (the ring pipelines, this holds every chunk).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

// One message's measure: sum of squares of its elements (double, in order)
// and whether every element was finite.
struct ChunkFigure {
  double sumsq = 0;
  bool finite = true;
  void Add(const ChunkFigure& o) {
    sumsq += o.sumsq;
    finite = finite && o.finite;
  }
  bool operator==(const ChunkFigure&) const = default;
};

// One rank's figures of one audited all-reduce (or several, added up), by
// group index. At [self]: this rank's own chunk of its buffer, which it
// neither sends nor receives (sent[self] == received[self]), and its summed
// chunk (gathered[self] == summed).
struct AuditFigures {
  std::vector<ChunkFigure> sent;      // the chunk this rank sent each rank
  std::vector<ChunkFigure> received;  // the chunk each rank sent this one
  ChunkFigure summed;                 // this rank's summed chunk, sent to every rank
  std::vector<ChunkFigure> gathered;  // each rank's summed chunk as it arrived here
  bool empty() const { return sent.empty(); }
  // Adds `o` (of the same group) figure by figure; into an empty one, copies it.
  void Add(const AuditFigures& o);
  // Every sum of squares times `factor` (a change of units: wire scale).
  void Scale(double factor);
};

// Sums `data` over the group in place (every member passes the same length
// and options, with options.segment_elems set), with options.pre_scale /
// post_scale, and fills `figures` (measured after pre_scale, before
// post_scale). `half` holds IEEE binary16 bits.
[[nodiscard]] Status AllreduceAudited(const CollectiveGroup& group, std::span<float> data,
                                      const AllreduceOptions& options, AuditFigures* figures);
[[nodiscard]] Status AllreduceAudited(const CollectiveGroup& group, std::span<uint16_t> half,
                                      const AllreduceOptions& options, AuditFigures* figures);

}  // namespace chorus::gossip
