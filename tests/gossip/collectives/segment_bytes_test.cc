// DefaultSegmentBytes: the segment size of every all-reduce algorithm when the
// caller leaves it to the collective.
#include <gtest/gtest.h>

#include <cstddef>

#include "gossip/collectives/collective_options.h"
#include "gossip/transport/provider.h"
#include "gossip/transport/seal/data_seal.h"

namespace chorus::gossip {
namespace {

TEST(SegmentBytesTest, DefaultSegmentIsLargerForAPairAndWhereRanksOutnumberCores) {
  constexpr size_t kKiB = 1024;
  EXPECT_EQ(DefaultSegmentBytes(2), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kTree), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(3), 256 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(8), 256 * kKiB);
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
                               AllreduceAlgorithm::kRecursiveDoubling}) {
    EXPECT_EQ(DefaultSegmentBytes(4, /*oversubscribed=*/true, a), 512 * kKiB) << AllreduceAlgorithmName(a);
    EXPECT_EQ(DefaultSegmentBytes(4, /*oversubscribed=*/false, a), 256 * kKiB) << AllreduceAlgorithmName(a);
  }
  // The tree pipelines its segments down its hops: it keeps the small ones.
  EXPECT_EQ(DefaultSegmentBytes(4, /*oversubscribed=*/true, AllreduceAlgorithm::kTree), 256 * kKiB);
}

// A pair whose eager limit just lets its 512 KiB segments through
// (fabric.rxm_eager_kib = 516): large buffers move in segments one page above
// it (each by rendezvous), smaller ones as before; other limits change nothing.
TEST(SegmentBytesTest, APairSendsLargeBuffersInSegmentsJustAboveATightEagerLimit) {
  constexpr size_t kKiB = 1024;
  const size_t tight = 516 * kKiB;
  EXPECT_LE(512 * kKiB + kSealTrailerBytes, tight);  // a sealed default segment still goes eagerly
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, kRendezvousSegmentsFrom, tight), 520 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, 64 << 20, 512 * kKiB), 516 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, kRendezvousSegmentsFrom - 1, tight), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, 64 << 20, kDefaultRxmEagerLimit), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, 64 << 20, 256 * kKiB), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(2, false, AllreduceAlgorithm::kRing, 64 << 20, /*eager_limit=*/0), 512 * kKiB);
  EXPECT_EQ(DefaultSegmentBytes(4, false, AllreduceAlgorithm::kRing, 64 << 20, tight), 256 * kKiB);
}

}  // namespace
}  // namespace chorus::gossip
