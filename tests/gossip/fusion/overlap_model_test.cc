// Tests of the overlap model (ChooseFirstBucket) on hand-computed figures.
#include "gossip/fusion/overlap_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus::gossip {
namespace {

// The MLP's layout: fc3 + fc2 (134 KiB) are final first, fc1 (785 KiB) last;
// the default layout is one bucket of the whole 919 KiB.
constexpr size_t kFirstTwo = 134 * 1024;
constexpr size_t kWhole = 919 * 1024;

OverlapFigures Figures(double spare, double alpha, double per_byte, std::vector<double> rest) {
  OverlapFigures f;
  f.spare_cores = spare;
  f.alpha_us = alpha;
  f.per_byte_us = per_byte;
  f.rest_us = std::move(rest);
  return f;
}

// 1 GB/s (0.001 us a byte), 50 us a call. Candidates: the first group
// (100 KB) and the first two (200 KB). Rank 0 has 300 and 100 us of backward
// after them, rank 1 250 and 90.
//   k = 1: min(102.4, 300 - 50) = 102.4 on rank 0; min(102.4, 200) = 102.4 on rank 1
//   k = 2: min(204.8, 100 - 50) = 50 on rank 0; min(204.8, 40) = 40 on rank 1
// The floor: max(20, 5% of the default call, 50 + 941.056) = 49.55; k = 1 wins.
TEST(OverlapModelTest, ChoosesTheSplitThatSavesMostOnTheSlowestRank) {
  const std::vector<size_t> prefix = {102400, 204800};
  const std::vector<OverlapFigures> ranks = {Figures(3, 50, 0.001, {300, 100}), Figures(2, 50, 0.001, {250, 90})};
  const FirstBucketChoice c = ChooseFirstBucket(prefix, kWhole, ranks);
  EXPECT_EQ(c.bytes, 102400u);
  EXPECT_EQ(c.groups, 1u);
  EXPECT_NEAR(c.gain_us, 102.4, 1e-9);
  EXPECT_NE(c.reason.find("first bucket of 100 KiB (1 layer)"), std::string::npos) << c.reason;

  // A slower wire: at 0.004 us a byte the first group's 409.6 us are hidden
  // up to its window, 250 us on rank 1 (rank 0's is 250 too, the first two
  // 40 and 50). That clears 5% of the default call (50 + 3764.2 us).
  std::vector<OverlapFigures> slow = ranks;
  for (OverlapFigures& f : slow) f.per_byte_us = 0.004;
  const FirstBucketChoice s = ChooseFirstBucket(prefix, kWhole, slow);
  EXPECT_EQ(s.bytes, 102400u);
  EXPECT_NEAR(s.gain_us, 200.0, 1e-9);  // rank 1: 250 - 50
  EXPECT_EQ(s.limiting_rank, 1);
  // At 0.01 us a byte the default call takes 9,460 us: 200 us is under its 5%.
  for (OverlapFigures& f : slow) f.per_byte_us = 0.01;
  const FirstBucketChoice t = ChooseFirstBucket(prefix, kWhole, slow);
  EXPECT_EQ(t.bytes, 0u);
  EXPECT_NE(t.reason.find("under the 473 us worth a second call"), std::string::npos) << t.reason;
}

TEST(OverlapModelTest, NoSpareCoreAnywhereKeepsOneBucket) {
  const std::vector<size_t> prefix = {kFirstTwo};
  const std::vector<OverlapFigures> ranks = {Figures(4, 10, 0.001, {500}), Figures(0.29, 10, 0.001, {500})};
  const FirstBucketChoice c = ChooseFirstBucket(prefix, kWhole, ranks);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(c.limiting_rank, 1);
  EXPECT_NE(c.reason.find("rank 1's host had 0.29 idle cores"), std::string::npos) << c.reason;
}

// The MLP on a host whose wake-ups cost more than fc1's backward: the 120 us
// of backward left cannot hide a call that costs 150 us to start.
TEST(OverlapModelTest, BackwardShorterThanTheCallsCostKeepsOneBucket) {
  const std::vector<size_t> prefix = {kFirstTwo};
  const std::vector<OverlapFigures> ranks = {Figures(2, 150, 0.0005, {120}), Figures(2, 150, 0.0005, {120})};
  const FirstBucketChoice c = ChooseFirstBucket(prefix, kWhole, ranks);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_LT(c.gain_us, 0);
  EXPECT_NE(c.reason.find("would save -30 us"), std::string::npos) << c.reason;
}

// With the default layout already in several buckets, only splits below its
// first bucket are candidates, and the window is measured from when that
// bucket would have started (rest_default_us before the end of backward).
TEST(OverlapModelTest, SeveralDefaultBucketsCountFromTheFirstOnesStart) {
  const std::vector<size_t> prefix = {200 * 1024, 600 * 1024, 1500 * 1024};
  OverlapFigures f = Figures(8, 40, 0.001, {900, 700, 100});
  f.rest_default_us = 500;  // the default first bucket (1 MiB) was ready 500 us before the end
  const std::vector<OverlapFigures> ranks = {f, f};
  const FirstBucketChoice c = ChooseFirstBucket(prefix, 1024 * 1024, ranks);
  // k = 1: min(204.8, 900 - 500 - 40 = 360) = 204.8; k = 2: min(614.4, 160) = 160; k = 3 is above 1 MiB.
  EXPECT_EQ(c.bytes, 200u * 1024);
  EXPECT_NEAR(c.gain_us, 204.8, 1e-9);
  // One group, or none below the default first bucket: nothing to choose.
  EXPECT_EQ(ChooseFirstBucket(std::vector<size_t>{}, kWhole, ranks).bytes, 0u);
  EXPECT_EQ(ChooseFirstBucket(std::vector<size_t>{2048 * 1024}, 1024 * 1024, ranks).bytes, 0u);
}

TEST(OverlapModelTest, FiguresTravelAsOneFlatVector) {
  OverlapFigures f = Figures(3.5, 42, 0.002, {7, 8, 9});
  f.rest_default_us = 1.5;
  const std::vector<float> flat = FlattenOverlapFigures(f);
  ASSERT_EQ(flat.size(), 7u);
  const OverlapFigures back = UnflattenOverlapFigures(flat);
  EXPECT_FLOAT_EQ(back.spare_cores, 3.5f);
  EXPECT_FLOAT_EQ(back.alpha_us, 42.0f);
  EXPECT_FLOAT_EQ(back.per_byte_us, 0.002f);
  EXPECT_FLOAT_EQ(back.rest_default_us, 1.5f);
  EXPECT_EQ(back.rest_us, (std::vector<double>{7, 8, 9}));
}

}  // namespace
}  // namespace chorus::gossip
