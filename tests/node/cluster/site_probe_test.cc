// The site probe's transfer size: a member's bytes stay bounded as the
// members grow, and a probe among local threads sends no more than that;
// pairs known from the last probe are not measured again.
#include "node/cluster/site_probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/gossip/forwarding_transport.h"
#include "tests/gossip/gossip_test_util.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

TEST(SiteProbeTest, EachTransferShrinksWithTheMembersToKeepAMembersBytesBounded) {
  const SiteProbeOptions o;  // 512 KiB at most, 64 KiB at least, 24 MiB per member, 3 to 6 repeats
  EXPECT_EQ(ProbeBytes(o, 2), o.bytes);
  EXPECT_EQ(ProbeBytes(o, 8), o.bytes);
  EXPECT_EQ(ProbeBytes(o, 32), o.max_bytes_per_node / (31 * 6));
  EXPECT_EQ(ProbeBytes(o, 64), o.max_bytes_per_node / (63 * 6));
  EXPECT_EQ(ProbeBytes(o, 128), o.min_bytes);
  for (int n : {2, 8, 16, 32, 64}) {
    EXPECT_LE(static_cast<size_t>(n - 1) * 6 * ProbeBytes(o, n), o.max_bytes_per_node) << n << " members";
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
  o.max_bytes_per_node = 11 * 6 * 4096;  // 4 KiB per transfer
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
    EXPECT_LE(sent[r], o.max_bytes_per_node + 11 * 6 * 2 + 4096) << "rank " << r;
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
// measured with the first member of the one site, the pairs of the others
// are not; and a member whose last probe was over another view measures all
// its pairs.
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
    // One site: the new process is measured with rank 0 alone, and its
    // pairs with the others take that cost.
    EXPECT_EQ(joined[r].measured_pairs, 1) << "rank " << r;
    EXPECT_EQ(joined[r].inferred_pairs, kMembers - 2) << "rank " << r;
    EXPECT_EQ(joined[r].known_pairs, kPairs - (kMembers - 1)) << "rank " << r;
    if (r < kMembers - 1) {
      // Rank 0 starts one pair, with the new process (three to six probes); the others none.
      EXPECT_LE(sent_joined[r], (r == 0 ? 6 * 4096 + 6 * 2 : 0) + kGatherSlack) << "rank " << r;
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

// A transport whose sends to another site (rank parity) wait `delay` first:
// two sites over the in-process transport.
class TwoSiteTransport final : public gossip::testing::ForwardingTransport {
 public:
  TwoSiteTransport(gossip::Transport& inner, std::chrono::milliseconds delay)
      : ForwardingTransport(inner), delay_(delay) {}
  Result<gossip::RequestPtr> Isend(gossip::Rank dest, gossip::Tag tag, std::span<const std::byte> data) override {
    if (dest % 2 != rank() % 2) std::this_thread::sleep_for(delay_);
    return inner().Isend(dest, tag, data);
  }

 private:
  const std::chrono::milliseconds delay_;
};

// A transport whose sends on kProbeAnswer (round 0's answer to a probe
// under tag base kProbeBase) wait the next of `delays` first, and then no
// more: a host busy for the first probes of a pair.
constexpr gossip::Tag kProbeBase = gossip::Tag{1} << 20, kProbeAnswer = kProbeBase + 3;
class BusyHostTransport final : public gossip::testing::ForwardingTransport {
 public:
  BusyHostTransport(gossip::Transport& inner, std::vector<std::chrono::milliseconds> delays)
      : ForwardingTransport(inner), delays_(std::move(delays)) {}
  Result<gossip::RequestPtr> Isend(gossip::Rank dest, gossip::Tag tag, std::span<const std::byte> data) override {
    if (tag == kProbeAnswer && next_ < delays_.size()) std::this_thread::sleep_for(delays_[next_++]);
    return inner().Isend(dest, tag, data);
  }

 private:
  const std::vector<std::chrono::milliseconds> delays_;
  size_t next_ = 0;
};

// A pair whose first three probes a busy host slowed, each by another
// amount (12x and more apart: under ctest -j3 beside the process tests the
// 10 ms probe took 32 ms and agreed with the 40 ms one), is probed on until two probes agree, and keeps the link's cost,
// not the busy host's; a pair slow alike every time keeps that cost.
TEST(SiteProbeTest, AProbeSlowedByABusyHostIsRepeatedUntilTwoProbesAgree) {
  using std::chrono::milliseconds;
  SiteProbeOptions o = SmallProbes();
  o.repeat_below_s = 1.0;  // every probe here is repeated
  const std::vector<milliseconds> busy = {milliseconds(120), milliseconds(10), milliseconds(480)};
  const std::vector<milliseconds> slow(static_cast<size_t>(o.max_repeats), milliseconds(20));
  for (const bool slowed_alike : {false, true}) {
    const std::vector<milliseconds>& delays = slowed_alike ? slow : busy;
    std::vector<SiteProbe> probes(2);
    const std::vector<Status> statuses =
        gossip::testing::RunGossipNodes(2, [&](int r, gossip::Transport& local, gossip::LocalHub&) -> Status {
          BusyHostTransport t(local, r == 1 ? delays : std::vector<milliseconds>{});
          CHORUS_ASSIGN_OR_RETURN(probes[r], ProbeSites(t, View(r, 2), o, kProbeBase, Deadline::AfterSeconds(60)));
          return Status::Ok();
        });
    ASSERT_TRUE(statuses[0].ok() && statuses[1].ok()) << statuses[0].ToString() << " " << statuses[1].ToString();
    ASSERT_EQ(probes[0].started.size(), 1u);
    EXPECT_TRUE(probes[1].started.empty());
    const PairProbe& pair = probes[0].started[0];
    EXPECT_EQ(pair.peer, 1);
    EXPECT_LE(pair.probes, o.max_repeats);
    if (!slowed_alike) {
      EXPECT_GE(pair.probes, 5) << "two unslowed probes after the three slowed ones";
      EXPECT_LT(pair.cost_s, 0.01) << "the link's cost, not the busy host's";
    } else {
      EXPECT_GE(pair.cost_s, 0.02);
    }
    EXPECT_EQ(probes[0].cost_s[1], probes[1].cost_s[1]);
  }
}

// Two sites (even and odd ranks): one joiner is measured with the first
// member of each site and lands in its own; two joiners also with each
// other. The groups match a probe of every pair.
TEST(SiteProbeTest, AJoinerIsMeasuredWithOneMemberOfEachSite) {
  constexpr int kMembers = 8, kPairs = kMembers * (kMembers - 1) / 2;
  const SiteProbeOptions o = SmallProbes();
  std::vector<SiteProbe> first(kMembers), one(kMembers), two(kMembers);
  const std::vector<Status> statuses =
      gossip::testing::RunGossipNodes(kMembers, [&](int r, gossip::Transport& local, gossip::LocalHub&) -> Status {
        TwoSiteTransport t(local, std::chrono::milliseconds(20));
        MembershipView v = View(r, kMembers);
        v.epoch = 1;
        auto probe = [&](gossip::Tag base, const KnownLinks& known, SiteProbe* out) -> Status {
          CHORUS_ASSIGN_OR_RETURN(*out, ProbeSites(t, v, o, base, Deadline::AfterSeconds(60), &known));
          return Status::Ok();
        };
        CHORUS_RETURN_IF_ERROR(probe(gossip::Tag{1} << 24, KnownLinks{}, &first[r]));
        KnownLinks known;
        known.Remember(first[r], v);
        // Rank 7 is another process now; then ranks 6 and 7.
        v.epoch = 2;
        v.members[7].name = "node7b";
        CHORUS_RETURN_IF_ERROR(probe(gossip::Tag{2} << 24, r == 7 ? KnownLinks{} : known, &one[r]));
        v.epoch = 3;
        v.members[6].name = "node6b";
        return probe(gossip::Tag{3} << 24, r >= 6 ? KnownLinks{} : known, &two[r]);
      });
  for (int r = 0; r < kMembers; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    ASSERT_EQ(first[r].groups.groups, 2) << "rank " << r;
    for (int j = 0; j < kMembers; ++j) {
      EXPECT_EQ(first[r].groups.group_of_rank[j], j % 2) << "rank " << r << " puts " << j;
      EXPECT_EQ(one[r].groups.group_of_rank, first[r].groups.group_of_rank) << "rank " << r;
      EXPECT_EQ(two[r].groups.group_of_rank, first[r].groups.group_of_rank) << "rank " << r;
    }
    // One joiner: with ranks 0 and 1; its 5 other pairs inferred.
    EXPECT_EQ(one[r].measured_pairs, 2) << "rank " << r;
    EXPECT_EQ(one[r].inferred_pairs, 5) << "rank " << r;
    EXPECT_EQ(one[r].known_pairs, kPairs - 7) << "rank " << r;
    // Two: each with ranks 0 and 1, and with each other; 4 pairs each inferred.
    EXPECT_EQ(two[r].measured_pairs, 5) << "rank " << r;
    EXPECT_EQ(two[r].inferred_pairs, 8) << "rank " << r;
    EXPECT_EQ(two[r].known_pairs, 15) << "rank " << r;
    EXPECT_EQ(two[r].cost_s, two[0].cost_s) << "rank " << r << " installed other costs";
  }
  // The joiner's inferred pairs take the cost it measured with its site's first member.
  EXPECT_EQ(one[0].cost_s[7 * kMembers + 3], one[0].cost_s[7 * kMembers + 1]);
  EXPECT_EQ(one[0].cost_s[7 * kMembers + 4], one[0].cost_s[7 * kMembers + 0]);
}

}  // namespace
}  // namespace chorus::node
