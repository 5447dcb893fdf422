// Tests of the sparse ring reduce: the sum it gives, with what the codecs
// dropped, is the dense sum of the inputs; every rank gets the same bytes; a
// lossless codec gives the exact sum; and the bytes per rank stay within a
// constant factor of one message of the whole vector at 8 and 64 ranks, where
// sending every message to every rank grows with the rank count.
#include "gossip/protocols/sparse_ring_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gossip/codecs/codec.h"
#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

std::unique_ptr<Codec> TopK(double ratio, int value_bits) {
  CodecOptions o;
  o.kind = CodecKind::kTopK;
  o.ratio = ratio;
  o.value_bits = value_bits;
  return std::move(*MakeCodec(o));
}

struct RingRun {
  std::vector<std::vector<float>> x, residual, result;
  std::vector<SparseRingStats> stats;
};

RingRun RunSparseRing(int n, size_t len, const Codec& codec) {
  RingRun run;
  run.x.resize(n);
  run.residual.assign(n, std::vector<float>(len, 7.0f));  // overwritten: the call's own drops only
  run.result.assign(n, std::vector<float>(len));
  run.stats.resize(n);
  for (int r = 0; r < n; ++r) run.x[r] = testing::RandomVector(11, r, len);
  std::vector<Status> statuses = testing::RunRanks(n, n, [&](int r, Transport& t) {
    return SparseRingAllreduce(t, codec, run.x[r], run.residual[r], run.result[r], 100, 5,
                               Deadline::AfterSeconds(60), &run.stats[r]);
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  return run;
}

TEST(SparseRingReduceTest, TheSumWithWhatWasDroppedIsTheDenseSum) {
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const size_t len = 1003;  // chunks of unequal length
    auto codec = TopK(0.1, 32);
    RingRun run = RunSparseRing(n, len, *codec);
    double worst = 0.0, dropped = 0.0;
    for (size_t i = 0; i < len; ++i) {
      double dense = 0.0, kept = 0.0;
      for (int r = 0; r < n; ++r) {
        dense += run.x[r][i];
        kept += run.residual[r][i];
      }
      worst = std::max(worst, std::abs(dense - (run.result[0][i] + kept)));
      dropped = std::max(dropped, std::abs(kept));
    }
    EXPECT_LT(worst, 1e-4);
    EXPECT_GT(dropped, 0.1);  // top-10% did drop something
    for (int r = 1; r < n; ++r) EXPECT_EQ(run.result[r], run.result[0]) << r;
  }
}

TEST(SparseRingReduceTest, ALosslessCodecGivesTheExactSum) {
  CodecOptions o;
  o.kind = CodecKind::kNone;
  auto codec = std::move(*MakeCodec(o));
  const int n = 4;
  const size_t len = 50;
  RingRun run;
  run.x.resize(n);
  run.residual.assign(n, std::vector<float>(len));
  run.result.assign(n, std::vector<float>(len));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < len; ++i) run.x[r].push_back(testing::ClosedFormInput(r, i));
  }
  std::vector<Status> statuses = testing::RunRanks(n, n, [&](int r, Transport& t) {
    return SparseRingAllreduce(t, *codec, run.x[r], run.residual[r], run.result[r], 100, 5,
                               Deadline::AfterSeconds(60));
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    for (size_t i = 0; i < len; ++i) {
      EXPECT_EQ(run.result[r][i], testing::ClosedFormSum(n, i));
      EXPECT_EQ(run.residual[r][i], 0.0f);
    }
  }
}

// Top-2% in 8 bits over 100,000 elements: one message is WireBytes(len).
// The ring's bytes per rank: about two messages whatever n (headers add a
// little per chunk); all-to-all would send n - 1.
TEST(SparseRingReduceTest, BytesPerRankStayNearTwoMessagesAtAnyRankCount) {
  const size_t len = 100000;
  auto codec = TopK(0.02, 8);
  const double one = static_cast<double>(codec->WireBytes(len));
  for (int n : {8, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    RingRun run = RunSparseRing(n, len, *codec);
    for (int r = 0; r < n; ++r) {
      const double sent = static_cast<double>(run.stats[r].bytes_sent);
      EXPECT_LT(sent, 3.0 * one) << r;
      EXPECT_GT(sent, 1.5 * one) << r;
      EXPECT_EQ(run.stats[r].messages_sent, 2u * static_cast<uint64_t>(n - 1)) << r;
    }
    EXPECT_EQ(static_cast<uint64_t>(SparseRingBytesPerRank(*codec, len, n)), run.stats[0].bytes_sent);
  }
}

// A rank that sends NaN in every message at the ring's tags (as a member
// that bypassed its own check would): the others do not wait on it or fail.
// Its successor takes the messages as zeros and counts them; a rank that
// passes no stats object fails as before.
TEST(SparseRingReduceTest, NonFiniteMessagesAreTakenAsZerosAndCounted) {
  constexpr int n = 3;
  constexpr size_t len = 300;  // chunks of 100
  CodecOptions o;
  o.kind = CodecKind::kFp16;
  auto codec = std::move(*MakeCodec(o));
  const std::vector<float> nan(len / n, std::nanf(""));
  std::vector<std::vector<float>> residual(n, std::vector<float>(len)), result(n, std::vector<float>(len));
  std::vector<SparseRingStats> stats(n);
  std::vector<Status> statuses = testing::RunRanks(n, n, [&](int r, Transport& t) -> Status {
    if (r < n - 1) {
      const std::vector<float> x = testing::RandomVector(11, r, len);
      return SparseRingAllreduce(t, *codec, x, residual[r], result[r], 100, 5, Deadline::AfterSeconds(60),
                                 r == 0 ? &stats[r] : nullptr);
    }
    // Rank 2: NaN at each of the 2 (n - 1) steps, to rank 0; rank 1's messages taken.
    std::vector<std::byte> out, in(codec->WireBytes(len / n));
    CHORUS_RETURN_IF_ERROR(codec->Encode(nan, 1, &out));
    for (int s = 0; s < 2 * (n - 1); ++s) {
      CHORUS_ASSIGN_OR_RETURN(RequestPtr send, t.Isend(0, 100 + static_cast<Tag>(s), out));
      CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(1, 100 + static_cast<Tag>(s), in, Deadline::AfterSeconds(60))));
      CHORUS_RETURN_IF_ERROR(StatusOf(send->Wait(Deadline::AfterSeconds(60))));
    }
    return Status::Ok();
  });
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_EQ(stats[0].nonfinite_received, 2u * (n - 1));
  for (float v : result[0]) ASSERT_TRUE(std::isfinite(v));
  // Without a stats object rank 1 fails on the NaN that rank 0 forwards, naming it.
  EXPECT_FALSE(statuses[1].ok());
  EXPECT_TRUE(IsNonFiniteRejection(statuses[1])) << statuses[1].ToString();
  EXPECT_TRUE(statuses[2].ok()) << statuses[2].ToString();
}

}  // namespace
}  // namespace chorus::gossip
