// SampleCounter: the cluster's sample count as a grow-only counter per node
// incarnation. Merging is an entry-wise maximum, so replicas that exchange
// their maps in any order and any number of times agree on one total; a
// restarted node's new incarnation counts beside its old one.
#include "node/control/sample_counter.h"

#include <gtest/gtest.h>

namespace chorus::node {
namespace {

TEST(SampleCounterTest, RaiseNeverLowers) {
  SampleCounter c;
  c.Raise("a#1", 100);
  c.Raise("a#1", 40);
  EXPECT_EQ(c.Of("a#1"), 100u);
  EXPECT_EQ(c.Total(), 100u);
}

TEST(SampleCounterTest, ARestartedNodeCountsOnceBesideItsEarlierRun) {
  SampleCounter c;
  c.Raise("a#1", 5000);  // the first run of node a, then killed
  c.Raise("b#1", 7000);
  c.Raise("a#2", 300);   // a restarted: its count starts again from 0
  EXPECT_EQ(c.Total(), 12300u);
}

TEST(SampleCounterTest, MergesInAnyOrderAndRepeatedlyToOneTotal) {
  SampleCounter x, y, z;
  x.Raise("a#1", 10);
  x.Raise("b#1", 3);
  y.Raise("b#1", 20);
  y.Raise("c#1", 1);
  z.Merge(y.counts());
  z.Merge(x.counts());
  z.Merge(y.counts());
  SampleCounter w;
  w.Merge(x.counts());
  w.Merge(y.counts());
  EXPECT_EQ(z.counts(), w.counts());
  EXPECT_EQ(z.Total(), 10u + 20u + 1u);
}

TEST(SampleCounterTest, EncodeDecodeRoundTrips) {
  const std::map<std::string, uint64_t> counts = {{"node0#00aa", 12}, {"vm-22627#ff", uint64_t{1} << 50}};
  Result<std::map<std::string, uint64_t>> back = SampleCounter::Decode(SampleCounter::Encode(counts), "test");
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(*back, counts);
  EXPECT_TRUE(SampleCounter::Decode("", "test").has_value());
}

TEST(SampleCounterTest, DecodeNamesWhatIsWrong) {
  for (const char* bad : {"a#1", "=5", "a#1=", "a#1=x", "a#1=5;b", "a#1=-1"}) {
    Result<std::map<std::string, uint64_t>> r = SampleCounter::Decode(bad, "ckpt.safetensors");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message().find("ckpt.safetensors: sample counts"), std::string::npos) << r.error().message();
  }
}

TEST(SampleCounterTest, IncarnationsOfOneNameDiffer) {
  const std::string a = NewIncarnation("node3"), b = NewIncarnation("node3");
  EXPECT_EQ(a.rfind("node3#", 0), 0u);
  EXPECT_EQ(a.size(), 6u + 16u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace chorus::node
