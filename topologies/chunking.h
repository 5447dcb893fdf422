// Chunks and segments: how collective schedules cut a buffer of L elements.
//
// PartitionChunks splits [0, L) into n contiguous chunks whose sizes differ by at most
// one (the first L mod n chunks get the extra element; chunks may be empty when
// L < n). SegmentRange cuts one chunk into pieces of at most S elements so a
// transfer can be pipelined (gloo's chunks and segments). Indices only: no buffers.
// Pure and std only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace chorus::topologies {

// Half-open element range [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const Range&, const Range&) = default;
};

// n chunks covering [0, length) in order. Needs length >= 0 and n >= 1.
Result<std::vector<Range>> PartitionChunks(int64_t length, int n);

// Chunk c of PartitionChunks(length, n), without building the others (for a
// hot path that needs one). Needs length >= 0, n >= 1, 0 <= c < n (unchecked).
inline Range ChunkOf(int64_t length, int n, int c) {
  const int64_t base = length / n;
  const int64_t extra = length % n;  // the first `extra` chunks hold base + 1
  const int64_t begin = base * c + (c < extra ? c : extra);
  return Range{begin, begin + base + (c < extra ? 1 : 0)};
}

// Pieces of `range` in order, each of at most max_segment elements (the last may be
// shorter); an empty range has no pieces. Needs max_segment >= 1.
Result<std::vector<Range>> SegmentRange(Range range, int64_t max_segment);

}  // namespace chorus::topologies
