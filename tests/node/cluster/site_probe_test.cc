// The site probe's transfer size: a member's bytes stay bounded as the
// members grow, and a probe among local threads sends no more than that;
// pairs known from the last probe are not measured again.
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

constexpr int kProbeMembers = 12;

// A probe among kProbeMembers local threads: each member's result and bytes sent.
struct ProbeRun {
  std::vector<SiteProbe> probes = std::vector<SiteProbe>(kProbeMembers);
  std::vector<uint64_t> sent = std::vector<uint64_t>(kProbeMembers);
  std::vector<Status> statuses;
};
ProbeRun RunProbe(const SiteProbeOptions& o) {
  ProbeRun run;
  run.statuses = gossip::testing::RunGossipNodes(kProbeMembers, [&](int r, gossip::Transport& t, gossip::LocalHub&) {
    const MembershipView view = View(r, kProbeMembers);
    const uint64_t before = t.Stats().bytes_sent;
    Result<SiteProbe> probe = ProbeSites(t, view, o, /*tag_base=*/1 << 20, Deadline::AfterSeconds(60));
    if (!probe) return probe.error();
    run.probes[r] = *probe;
    run.sent[r] = t.Stats().bytes_sent - before;
    return Status::Ok();
  });
  return run;
}

SiteProbeOptions SmallProbes() {
  SiteProbeOptions o;
  o.bytes = 64 * 1024;
  o.min_bytes = 1024;
  o.max_bytes_per_node = 11 * 3 * 4096;  // 4 KiB per transfer
  return o;
}

// Twelve members over the in-process transport (links alike: one site):
// each sends at most its bound, and every pair is measured.
TEST(SiteProbeTest, TwelveMembersSendNoMoreThanTheirBoundAndMeasureEveryPair) {
  constexpr int kMembers = kProbeMembers;
  const SiteProbeOptions o = SmallProbes();
  const ProbeRun run = RunProbe(o);
  const std::vector<SiteProbe>& probes = run.probes;
  const std::vector<uint64_t>& sent = run.sent;
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(run.statuses[r].ok()) << "rank " << r << ": " << run.statuses[r].ToString();
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

// A pair whose first probe took repeat_below_s is not probed again: the
// member that starts it sends one transfer instead of `repeats`. Rank r
// starts the pairs with the 11 - r ranks above it.
TEST(SiteProbeTest, AProbeAsSlowAsTheBoundIsNotRepeated) {
  SiteProbeOptions o = SmallProbes();
  o.repeat_below_s = 1e9;  // never slow enough: every pair three times
  const ProbeRun all = RunProbe(o);
  o.repeat_below_s = 0.0;  // always: every pair once
  const ProbeRun once = RunProbe(o);
  constexpr uint64_t kGatherSlack = 4096;
  for (int r = 0; r < kProbeMembers; ++r) {
    ASSERT_TRUE(all.statuses[r].ok() && once.statuses[r].ok()) << "rank " << r;
    const uint64_t started = static_cast<uint64_t>(kProbeMembers - 1 - r);
    EXPECT_GE(all.sent[r], started * 3 * 4096) << "rank " << r;
    EXPECT_LE(once.sent[r], started * 4096 + 3 * kProbeMembers * 2 + kGatherSlack) << "rank " << r;
    for (int j = 0; j < kProbeMembers; ++j) {
      if (j == r) continue;
      EXPECT_GT(once.probes[r].cost_s[static_cast<size_t>(r * kProbeMembers + j)], 0.0) << r << "-" << j;
    }
  }
}

// Known links: the same members probing again measure nothing; a member
// that is another process now (a joiner, or a restart: no last probe) is
// measured with every member, the pairs of the others are not; and a member
// whose last probe was over another view measures all its pairs.
TEST(SiteProbeTest, ALaterProbeMeasuresOnlyThePairsNotKnownFromTheLastOne) {
  constexpr int kMembers = kProbeMembers, kPairs = kMembers * (kMembers - 1) / 2;
  const SiteProbeOptions o = SmallProbes();
  std::vector<SiteProbe> first(kMembers), again(kMembers), joined(kMembers), other(kMembers);
  std::vector<uint64_t> sent_again(kMembers), sent_joined(kMembers);
  auto probe = [&](gossip::Transport& t, const MembershipView& view, gossip::Tag base, const KnownLinks* known,
                   SiteProbe* out, uint64_t* sent) -> Status {
    const uint64_t before = t.Stats().bytes_sent;
    Result<SiteProbe> p = ProbeSites(t, view, o, base, Deadline::AfterSeconds(60), known);
    if (!p) return p.error();
    *out = *p;
    if (sent != nullptr) *sent = t.Stats().bytes_sent - before;
    return Status::Ok();
  };
  const std::vector<Status> statuses =
      gossip::testing::RunGossipNodes(kMembers, [&](int r, gossip::Transport& t, gossip::LocalHub&) -> Status {
        MembershipView v = View(r, kMembers);
        v.epoch = 1;
        CHORUS_RETURN_IF_ERROR(probe(t, v, gossip::Tag{1} << 24, nullptr, &first[r], nullptr));
        KnownLinks known;
        known.Remember(first[r], v);
        CHORUS_RETURN_IF_ERROR(probe(t, v, gossip::Tag{2} << 24, &known, &again[r], &sent_again[r]));
        // The last rank is another process now: another name, and no last probe.
        v.epoch = 2;
        v.members[kMembers - 1].name = "node11b";
        if (r == kMembers - 1) known = KnownLinks{};
        CHORUS_RETURN_IF_ERROR(probe(t, v, gossip::Tag{3} << 24, &known, &joined[r], &sent_joined[r]));
        // Rank 0's last probe is taken for another view's.
        KnownLinks elsewhere = known;
        if (r == 0) elsewhere.view_id += 1;
        return probe(t, v, gossip::Tag{4} << 24, &elsewhere, &other[r], nullptr);
      });
  constexpr uint64_t kGatherSlack = 4096;
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    EXPECT_EQ(again[r].measured_pairs, 0) << "rank " << r;
    EXPECT_EQ(again[r].known_pairs, kPairs) << "rank " << r;
    EXPECT_EQ(again[r].cost_s, first[r].cost_s) << "rank " << r;
    EXPECT_LE(sent_again[r], kGatherSlack) << "rank " << r << ": only the gathers";
    EXPECT_EQ(joined[r].measured_pairs, kMembers - 1) << "rank " << r;
    EXPECT_EQ(joined[r].known_pairs, kPairs - (kMembers - 1)) << "rank " << r;
    if (r < kMembers - 1) {
      // One pair to start, with the new process (three probes).
      EXPECT_LE(sent_joined[r], 3 * 4096 + 3 * 2 + kGatherSlack) << "rank " << r;
      for (int j = 0; j < kMembers - 1; ++j) {
        const size_t at = static_cast<size_t>(r * kMembers + j);
        EXPECT_EQ(joined[r].cost_s[at], first[r].cost_s[at]) << r << "-" << j;
      }
    }
    EXPECT_GT(joined[r].cost_s[static_cast<size_t>(r * kMembers + (r + 1) % kMembers)], 0.0) << "rank " << r;
    EXPECT_EQ(joined[r].cost_s, joined[0].cost_s) << "rank " << r << " installed other costs";
    EXPECT_EQ(other[r].measured_pairs, (kMembers - 1) + (kMembers - 2)) << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus::node
