// Tests for the ring all-reduce schedule: run it on plain arrays (one vector per rank,
// all ranks stepping together) and compare with the closed-form sum, with and without
// segmentation; check both ends of every transfer agree.
#include "topologies/ring_schedule.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "topologies/chunking.h"

namespace chorus::topologies {
namespace {

// Rank r starts with x_r[i] = (r + 1) * 1000 + i: integers, so sums are exact in double
// and the result must equal sum_r x_r[i] = 1000 n (n + 1) / 2 + n i exactly.
std::vector<std::vector<double>> Inputs(int n, int64_t length) {
  std::vector<std::vector<double>> data(n, std::vector<double>(length));
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) data[r][i] = (r + 1) * 1000.0 + static_cast<double>(i);
  }
  return data;
}

double RingExpectedSum(int n, int64_t i) { return 1000.0 * n * (n + 1) / 2 + static_cast<double>(n * i); }

// One synchronous phase: every rank sends its step's chunk (segment by segment) from a
// snapshot, then every rank receives and reduces or copies.
void RunPhase(std::vector<std::vector<double>>& data, const std::vector<RingSchedule>& schedules,
              const std::vector<Range>& chunks, int64_t max_segment, bool reduce_phase, int step) {
  const int n = static_cast<int>(data.size());
  std::vector<std::vector<Range>> sent_segments(n);
  std::vector<std::vector<std::vector<double>>> payloads(n);
  for (int r = 0; r < n; ++r) {
    const RingStep& s = (reduce_phase ? schedules[r].reduce_scatter : schedules[r].all_gather)[step];
    ASSERT_EQ(s.send_to, (r + 1) % n);
    ASSERT_EQ(s.recv_from, (r + n - 1) % n);
    sent_segments[r] = *SegmentRange(chunks[s.send_chunk], max_segment);
    for (const Range& seg : sent_segments[r]) {
      payloads[r].emplace_back(data[r].begin() + seg.begin, data[r].begin() + seg.end);
    }
  }
  for (int r = 0; r < n; ++r) {
    const RingStep& s = (reduce_phase ? schedules[r].reduce_scatter : schedules[r].all_gather)[step];
    const int from = s.recv_from;
    // The receiver's view of what arrives must match what the sender sent.
    const std::vector<Range> expected = *SegmentRange(chunks[s.recv_chunk], max_segment);
    ASSERT_EQ(sent_segments[from], expected) << "step " << step << " rank " << r;
    for (size_t k = 0; k < expected.size(); ++k) {
      for (int64_t i = expected[k].begin; i < expected[k].end; ++i) {
        const double v = payloads[from][k][i - expected[k].begin];
        data[r][i] = reduce_phase ? data[r][i] + v : v;
      }
    }
  }
}

void CheckRingAllreduce(int n, int64_t length, int64_t max_segment) {
  std::vector<RingSchedule> schedules;
  for (int r = 0; r < n; ++r) {
    auto s = RingAllreduceSchedule(r, n);
    ASSERT_TRUE(s) << s.error().ToString();
    ASSERT_EQ(static_cast<int>(s->reduce_scatter.size()), n - 1);
    ASSERT_EQ(static_cast<int>(s->all_gather.size()), n - 1);
    schedules.push_back(*s);
  }
  const std::vector<Range> chunks = *PartitionChunks(length, n);
  auto data = Inputs(n, length);
  for (int step = 0; step + 1 < n; ++step) {
    ASSERT_NO_FATAL_FAILURE(RunPhase(data, schedules, chunks, max_segment, true, step));
  }
  // After reduce-scatter each rank's owned chunk is complete.
  for (int r = 0; r < n; ++r) {
    const Range owned = chunks[schedules[r].owned_chunk];
    for (int64_t i = owned.begin; i < owned.end; ++i) ASSERT_EQ(data[r][i], RingExpectedSum(n, i));
  }
  for (int step = 0; step + 1 < n; ++step) {
    ASSERT_NO_FATAL_FAILURE(RunPhase(data, schedules, chunks, max_segment, false, step));
  }
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) {
      ASSERT_EQ(data[r][i], RingExpectedSum(n, i)) << "n = " << n << " length " << length << " rank " << r
                                               << " element " << i;
    }
  }
}

TEST(RingSchedule, AllreduceGivesTheSumEverywhere) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{7} * n + 3, int64_t{1000}}) {
      ASSERT_NO_FATAL_FAILURE(CheckRingAllreduce(n, length, /*max_segment=*/1 << 20));
    }
  }
}

TEST(RingSchedule, AllreduceWithSmallSegments) {
  for (int n : {2, 3, 5, 8}) {
    for (int64_t length : {int64_t{n - 1}, int64_t{7} * n + 3, int64_t{1000}}) {
      for (int64_t max_segment : {1, 2, 5}) {
        ASSERT_NO_FATAL_FAILURE(CheckRingAllreduce(n, length, max_segment));
      }
    }
  }
}

TEST(RingSchedule, StepsFollowTheFormula) {
  auto s = RingAllreduceSchedule(2, 5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->owned_chunk, 3);
  EXPECT_EQ(s->reduce_scatter[0].send_chunk, 2);
  EXPECT_EQ(s->reduce_scatter[0].recv_chunk, 1);
  EXPECT_EQ(s->reduce_scatter[3].recv_chunk, 3);  // the last reduced chunk is the owned one
  EXPECT_EQ(s->all_gather[0].send_chunk, 3);      // all-gather starts from the owned chunk
  EXPECT_EQ(s->all_gather[3].recv_chunk, 4);
}

TEST(RingSchedule, RejectsRanksOutsideTheRing) {
  EXPECT_FALSE(RingAllreduceSchedule(0, 0));
  EXPECT_FALSE(RingAllreduceSchedule(3, 3));
  EXPECT_FALSE(RingAllreduceSchedule(-1, 3));
}

}  // namespace
}  // namespace chorus::topologies
