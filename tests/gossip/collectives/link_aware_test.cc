// Tests of link-aware collectives: with site keys the ring all-reduce (and
// hierarchical's leader ring) crosses each site boundary twice, counted by the
// transport's bytes to peers in other sites, and still sums exactly.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "gossip/collectives/collective.h"
#include "gossip/transport/local/local_transport.h"
#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

// What one rank sent in one all-reduce over a hub whose peers know their sites.
struct SiteRun {
  std::vector<uint64_t> bytes_across;  // by rank
  std::vector<uint64_t> bytes_total;   // by rank
  std::vector<Rank> ring;              // rank 0's RingOrder()
};

// n ranks, rank r in site sites[r] and on its own host; every rank all-reduces
// `len` floats with `algorithm`, with the site keys when `link_aware`.
SiteRun RunWithSites(const std::vector<std::string>& sites, AllreduceAlgorithm algorithm, bool link_aware,
                     size_t len) {
  const int n = static_cast<int>(sites.size());
  LocalHubOptions hub_options;
  hub_options.world_size = n;
  auto hub = LocalHub::Create(hub_options);
  auto transports = hub->MakeAll();
  std::vector<std::string> hosts;
  for (int r = 0; r < n; ++r) hosts.push_back("host" + std::to_string(r));
  SiteRun out;
  out.bytes_across.resize(n);
  out.bytes_total.resize(n);
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<PeerInfo> peers;
      for (int p = 0; p < n; ++p) {
        peers.push_back({p, transports[p]->LocalAddress(), "rank" + std::to_string(p), sites[p] != sites[r]});
      }
      statuses[r] = transports[r]->SetPeers(r, peers);
      if (!statuses[r].ok()) return;
      Result<Collective> c = Collective::Create(*transports[r], hosts, std::nullopt,
                                                link_aware ? sites : std::vector<std::string>{});
      if (!c) {
        statuses[r] = c.error();
        return;
      }
      if (r == 0) out.ring = c->RingOrder();
      const TransportStats before = transports[r]->Stats();
      std::vector<float> data(len);
      for (size_t i = 0; i < len; ++i) data[i] = testing::ClosedFormInput(r, i);
      AllreduceOptions options;
      options.algorithm = algorithm;
      options.segment_elems = 64;
      options.deadline = Deadline::AfterSeconds(30);
      statuses[r] = c->Allreduce(std::span<float>(data), options);
      for (size_t i = 0; i < len && statuses[r].ok(); ++i) {
        if (data[i] != testing::ClosedFormSum(n, i)) {
          statuses[r] = Internal("rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
                                 std::to_string(data[i]));
        }
      }
      const TransportStats after = transports[r]->Stats();
      out.bytes_across[r] = after.bytes_sent_across_sites - before.bytes_sent_across_sites;
      out.bytes_total[r] = after.bytes_sent - before.bytes_sent;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  return out;
}

std::vector<std::string> Alternating(int n) {
  std::vector<std::string> sites;
  for (int r = 0; r < n; ++r) sites.push_back(r % 2 == 0 ? "lab" : "home");
  return sites;
}

int Senders(const std::vector<uint64_t>& bytes) {
  int senders = 0;
  for (uint64_t b : bytes) senders += b > 0 ? 1 : 0;
  return senders;
}

uint64_t Sum(const std::vector<uint64_t>& bytes) {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  return sum;
}

TEST(LinkAwareRingTest, CrossesEachSiteBoundaryTwiceWhenRanksAlternate) {
  const int n = 8;
  const size_t len = 8 * 1000;
  const SiteRun aware = RunWithSites(Alternating(n), AllreduceAlgorithm::kRing, true, len);
  const SiteRun ranked = RunWithSites(Alternating(n), AllreduceAlgorithm::kRing, false, len);
  EXPECT_EQ(aware.ring, (std::vector<Rank>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(ranked.ring, (std::vector<Rank>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Two ring edges cross (one out of each site), each carrying 2 (n-1)/n of
  // the buffer; in rank order all eight do.
  EXPECT_EQ(Senders(aware.bytes_across), 2);
  EXPECT_EQ(Senders(ranked.bytes_across), n);
  const uint64_t per_edge = 2 * (n - 1) * (len / n) * sizeof(float);
  EXPECT_EQ(Sum(aware.bytes_across), 2 * per_edge);
  EXPECT_EQ(Sum(ranked.bytes_across), n * per_edge);
  EXPECT_EQ(Sum(aware.bytes_total), Sum(ranked.bytes_total));  // the same work, other edges
}

TEST(LinkAwareRingTest, ThreeUnevenSitesEachEnteredAndLeftOnce) {
  const std::vector<std::string> sites{"c", "a", "b", "a", "c", "b", "a"};
  const SiteRun aware = RunWithSites(sites, AllreduceAlgorithm::kRing, true, 7 * 64 + 5);
  EXPECT_EQ(aware.ring, (std::vector<Rank>{0, 4, 1, 3, 6, 2, 5}));
  EXPECT_EQ(Senders(aware.bytes_across), 3);
}

TEST(LinkAwareRingTest, HierarchicalLeadersRingBySite) {
  // Each rank its own host: hierarchical is the leaders' ring, which follows
  // the link-aware order too.
  const SiteRun aware = RunWithSites(Alternating(6), AllreduceAlgorithm::kHierarchical, true, 6 * 100);
  EXPECT_EQ(Senders(aware.bytes_across), 2);
  const SiteRun ranked = RunWithSites(Alternating(6), AllreduceAlgorithm::kHierarchical, false, 6 * 100);
  EXPECT_EQ(Senders(ranked.bytes_across), 6);
}

TEST(LinkAwareRingTest, WrongNumberOfSiteKeysIsAnError) {
  LocalHubOptions hub_options;
  hub_options.world_size = 1;
  auto hub = LocalHub::Create(hub_options);
  auto transports = hub->MakeAll();
  Result<Collective> c = Collective::Create(*transports[0], {"h"}, std::nullopt, {"a", "b"});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("2 site keys for 1 ranks"), std::string::npos) << c.error().message();
}

}  // namespace
}  // namespace chorus::gossip
