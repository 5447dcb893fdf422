// The site probe's transfer size: a member's bytes stay bounded as the
// members grow, and a probe among local threads sends no more than that.
#include "node/cluster/site_probe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/gossip/gossip_test_util.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

TEST(SiteProbeTest, EachTransferShrinksWithTheMembersToKeepAMembersBytesBounded) {
  const SiteProbeOptions o;  // 512 KiB at most, 64 KiB at least, 24 MiB per member, 3 repeats
  EXPECT_EQ(ProbeBytes(o, 2), o.bytes);
  EXPECT_EQ(ProbeBytes(o, 8), o.bytes);
  EXPECT_EQ(ProbeBytes(o, 32), o.max_bytes_per_node / (31 * 3));
  EXPECT_EQ(ProbeBytes(o, 128), o.max_bytes_per_node / (127 * 3));
  EXPECT_EQ(ProbeBytes(o, 256), o.min_bytes);
  for (int n : {2, 8, 16, 32, 64, 128}) {
    EXPECT_LE(static_cast<size_t>(n - 1) * 3 * ProbeBytes(o, n), o.max_bytes_per_node) << n << " members";
  }
}

// Twelve members over the in-process transport (links alike: one site):
// each sends at most its bound, and every pair is measured.
TEST(SiteProbeTest, TwelveMembersSendNoMoreThanTheirBoundAndMeasureEveryPair) {
  constexpr int kMembers = 12;
  SiteProbeOptions o;
  o.bytes = 64 * 1024;
  o.min_bytes = 1024;
  o.max_bytes_per_node = 11 * 3 * 4096;  // 4 KiB per transfer
  std::vector<SiteProbe> probes(kMembers);
  std::vector<uint64_t> sent(kMembers);
  auto statuses = gossip::testing::RunGossipNodes(kMembers, [&](int r, gossip::Transport& t, gossip::LocalHub&) {
    const MembershipView view = View(r, kMembers);
    const uint64_t before = t.Stats().bytes_sent;
    Result<SiteProbe> probe = ProbeSites(t, view, o, /*tag_base=*/1 << 20, Deadline::AfterSeconds(60));
    if (!probe) return probe.error();
    probes[r] = *probe;
    sent[r] = t.Stats().bytes_sent - before;
    return Status::Ok();
  });
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    EXPECT_EQ(probes[r].bytes, 4096u);
    // The transfers, their pings and answers, and the costs gathered (a few floats).
    EXPECT_LE(sent[r], o.max_bytes_per_node + 11 * 3 * 2 + 4096) << "rank " << r;
    for (int j = 0; j < kMembers; ++j) {
      if (j != r) {
        EXPECT_GT(probes[r].cost_s[static_cast<size_t>(r * kMembers + j)], 0.0) << r << "-" << j;
      }
    }
  }
}

}  // namespace
}  // namespace chorus::node
