// The audited all-reduce (allreduce_audited.h): the same sum as any other
// algorithm, and figures of every message that its sender and its receiver
// give alike, so that a disagreement can only be a lie.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/fp16.h"
#include "gossip/collectives/collective.h"
#include "tests/gossip/gossip_test_util.h"
#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RunRanks;

// Sum of squares of `values` times scale^2, as the audit measures it.
double SumSq(const std::vector<float>& values, size_t begin, size_t end, double scale) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += static_cast<double>(values[i]) * values[i];
  return s * scale * scale;
}

TEST(AuditedAllreduceTest, SumsLikeTheRingAndBothEndsOfEveryMessageAgree) {
  for (int n : {3, 4, 5}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t len = 7 * n + 3;  // uneven chunks
    AllreduceOptions options;
    options.segment_elems = 4;  // several segments a chunk
    options.pre_scale = 0.5f;
    options.deadline = Deadline::AfterSeconds(30);
    std::vector<std::vector<float>> inputs(n), results(n);
    std::vector<AuditFigures> figures(n);
    auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
      for (size_t i = 0; i < len; ++i) inputs[r].push_back(testing::ClosedFormInput(r, i));
      results[r] = inputs[r];
      return c.AuditedAllreduce(std::span<float>(results[r]), options, &figures[r]);
    });
    for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < len; ++i) {
        ASSERT_EQ(results[r][i], 0.5f * testing::ClosedFormSum(n, i)) << "rank " << r << " element " << i;
      }
    }
    // Chunk k of n over len: what PartitionChunks gives (sizes differ by at most one).
    std::vector<size_t> begin(n + 1);
    for (int k = 0; k <= n; ++k) begin[k] = len / n * k + std::min<size_t>(k, len % n);
    for (int j = 0; j < n; ++j) {
      ASSERT_EQ(figures[j].sent.size(), static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        // What j sent k is j's chunk k, pre-scaled, and k measured the same bytes.
        EXPECT_DOUBLE_EQ(figures[j].sent[k].sumsq, SumSq(inputs[j], begin[k], begin[k + 1], 0.5));
        EXPECT_EQ(figures[j].sent[k], figures[k].received[j]) << j << " -> " << k;
        // k's summed chunk as it sent it and as j received it.
        EXPECT_EQ(figures[k].summed, figures[j].gathered[k]) << k << " -> " << j;
        EXPECT_DOUBLE_EQ(figures[k].summed.sumsq, SumSq(results[j], begin[k], begin[k + 1], 1.0));
      }
    }
  }
}

TEST(AuditedAllreduceTest, HalfFiguresAreOfTheWireValuesAndSeeAnOverflow) {
  const int n = 4;
  const size_t len = 29;
  AllreduceOptions options;
  options.segment_elems = 3;
  options.deadline = Deadline::AfterSeconds(30);
  std::vector<AuditFigures> figures(n);
  std::vector<std::vector<uint16_t>> results(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    for (size_t i = 0; i < len; ++i) {
      // Rank 2 sends infinity in element 0 (chunk 0, which rank 0 sums).
      results[r].push_back(FloatToHalfBits(r == 2 && i == 0 ? INFINITY : testing::ClosedFormInput(r, i)));
    }
    return c.AuditedAllreduce(std::span<uint16_t>(results[r]), options, &figures[r]);
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  EXPECT_FALSE(figures[2].sent[0].finite);
  EXPECT_FALSE(figures[0].received[2].finite);
  EXPECT_FALSE(figures[0].summed.finite);
  EXPECT_FALSE(figures[3].gathered[0].finite);
  EXPECT_TRUE(figures[2].sent[1].finite);
  EXPECT_TRUE(figures[1].summed.finite);
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(figures[j].sent[k], figures[k].received[j]);
      EXPECT_EQ(figures[k].summed, figures[j].gathered[k]);
    }
  }
  // Elements past chunk 0 are finite sums of small integers, exact in FP16.
  for (size_t i = 8; i < len; ++i) EXPECT_EQ(HalfBitsToFloat(results[1][i]), testing::ClosedFormSum(n, i));
}

}  // namespace
}  // namespace chorus::gossip
