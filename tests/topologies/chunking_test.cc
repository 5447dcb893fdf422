// Tests for chunk partitions and segments: coverage, balance, empty chunks, limits.
#include "topologies/chunking.h"

#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

TEST(Chunking, PartitionCoversInOrderAndBalances) {
  for (int n : {1, 2, 3, 5, 8, 12}) {
    for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{7} * n + 3, int64_t{1000}}) {
      auto chunks = PartitionChunks(length, n);
      ASSERT_TRUE(chunks);
      ASSERT_EQ(static_cast<int>(chunks->size()), n);
      int64_t next = 0, smallest = length, largest = 0;
      for (const Range& c : *chunks) {
        EXPECT_EQ(c.begin, next);
        EXPECT_GE(c.size(), 0);
        smallest = std::min(smallest, c.size());
        largest = std::max(largest, c.size());
        next = c.end;
      }
      EXPECT_EQ(next, length) << "n = " << n << " length " << length;
      EXPECT_LE(largest - smallest, 1);
      // Larger chunks first.
      for (int c = 1; c < n; ++c) EXPECT_GE((*chunks)[c - 1].size(), (*chunks)[c].size());
    }
  }
  auto few = PartitionChunks(2, 5);
  ASSERT_TRUE(few);
  EXPECT_EQ((*few)[0], (Range{0, 1}));
  EXPECT_EQ((*few)[1], (Range{1, 2}));
  EXPECT_TRUE((*few)[4].empty());
}

TEST(Chunking, PartitionRejectsBadArguments) {
  EXPECT_FALSE(PartitionChunks(-1, 2));
  EXPECT_FALSE(PartitionChunks(10, 0));
}

TEST(Chunking, SegmentsAreBoundedAndCover) {
  for (int64_t max_segment : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{100}}) {
    for (Range r : {Range{0, 0}, Range{5, 6}, Range{10, 31}, Range{3, 24}}) {
      auto segments = SegmentRange(r, max_segment);
      ASSERT_TRUE(segments);
      int64_t next = r.begin;
      for (const Range& s : *segments) {
        EXPECT_EQ(s.begin, next);
        EXPECT_GT(s.size(), 0);
        EXPECT_LE(s.size(), max_segment);
        next = s.end;
      }
      EXPECT_EQ(next, r.end);
      EXPECT_EQ(static_cast<int64_t>(segments->size()), (r.size() + max_segment - 1) / max_segment);
    }
  }
  auto one = SegmentRange(Range{4, 9}, std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], (Range{4, 9}));
}

TEST(Chunking, SegmentRejectsBadArguments) {
  EXPECT_FALSE(SegmentRange(Range{0, 10}, 0));
  EXPECT_FALSE(SegmentRange(Range{5, 2}, 4));
  EXPECT_FALSE(SegmentRange(Range{-1, 2}, 4));
}

}  // namespace
}  // namespace chorus::topologies
