// Chunks and segments of a buffer. See chunking.h.
#include "topologies/chunking.h"

#include <string>
#include <vector>

namespace chorus::topologies {

Result<std::vector<Range>> PartitionChunks(int64_t length, int n) {
  if (length < 0) {
    return Err(InvalidArgument("chunk partition: length " + std::to_string(length) + " is negative"));
  }
  if (n < 1) {
    return Err(InvalidArgument("chunk partition: " + std::to_string(n) + " chunks; need >= 1"));
  }
  std::vector<Range> chunks(n);
  for (int c = 0; c < n; ++c) chunks[c] = ChunkOf(length, n, c);
  return chunks;
}

Result<std::vector<Range>> SegmentRange(Range range, int64_t max_segment) {
  if (max_segment < 1) {
    return Err(InvalidArgument("segmenting: max segment " + std::to_string(max_segment) +
                               " elements; need >= 1"));
  }
  if (range.begin < 0 || range.end < range.begin) {
    return Err(InvalidArgument("segmenting: range [" + std::to_string(range.begin) + ", " +
                               std::to_string(range.end) + ") is not a valid range"));
  }
  std::vector<Range> segments;
  for (int64_t begin = range.begin; begin < range.end;) {
    // Written so that a huge max_segment cannot overflow begin + max_segment.
    const int64_t end = range.end - begin <= max_segment ? range.end : begin + max_segment;
    segments.push_back(Range{begin, end});
    begin = end;
  }
  return segments;
}

}  // namespace chorus::topologies
