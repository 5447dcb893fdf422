// Tests of the collectives: the algorithm choice, and every all-reduce
// algorithm, broadcast and barrier run by N threads over a LocalHub (and once
// over libfabric). The schedules themselves are tested in tests/topologies/.
//
// Inputs are chosen so that the expected results are closed-form: rank r holds
// x_r[i] = r + 1 + i % 7, whose sum over n ranks is n(n+1)/2 + n (i % 7); small
// integers, so every summation order gives the exact float result.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/fp16.h"
#include "gossip/collectives/allreduce_auto.h"
#include "gossip/collectives/collective.h"
#include "gossip/transport/local/local_transport.h"
#include "tests/gossip/forwarding_transport.h"
#include "tests/gossip/gossip_test_util.h"
#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RunRanks;

float Input(int rank, size_t i) { return testing::ClosedFormInput(rank, i); }
float ExpectedSum(int n, size_t i) { return testing::ClosedFormSum(n, i); }

std::vector<std::string> HostKeysByPairs(int n) {
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back("host" + std::to_string(r / 2));
  return keys;
}

// Runs a float all-reduce of `len` elements on n ranks and checks the closed form.
void CheckFloatAllreduce(int n, size_t len, const AllreduceOptions& options,
                         const std::vector<std::string>& host_keys = {},
                         LocalLinkModel link = {}) {
  std::vector<std::vector<float>> results(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, host_keys));
    std::vector<float> data(len);
    for (size_t i = 0; i < len; ++i) data[i] = Input(r, i);
    Status s = c.Allreduce(std::span<float>(data), options);
    results[r] = std::move(data);
    return s;
  }, link);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    ASSERT_EQ(results[r].size(), len);
    for (size_t i = 0; i < len; ++i) {
      // Exact: the inputs and every partial sum are small integers.
      ASSERT_EQ(results[r][i], ExpectedSum(n, i)) << "rank " << r << " element " << i;
    }
  }
}

// ---- Algorithm choice ----

TEST(AllreduceAutoTest, FollowsTheCrossoverTable) {
  AllreduceCrossovers x;
  x.recursive_doubling_max_bytes = 20;
  x.tree_max_bytes = 100;
  x.halving_doubling_min_bytes = 101;
  x.halving_doubling_max_bytes = 1000;
  x.hierarchical_min_bytes = 500;
  // Small buffers: recursive doubling whatever the world size, two ranks included.
  EXPECT_EQ(ChooseAllreduceAlgorithm(0, 8, 8, x), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(20, 8, 8, x), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(10, 2, 2, x), AllreduceAlgorithm::kRecursiveDoubling);
  // Two ranks follow the same table.
  EXPECT_EQ(ChooseAllreduceAlgorithm(21, 2, 2, x), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(101, 2, 2, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 30, 2, 1, x), AllreduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllreduceAlgorithm(21, 8, 8, x), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(100, 8, 8, x), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(101, 8, 8, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1000, 8, 8, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1001, 8, 8, x), AllreduceAlgorithm::kRing);
  // A gap between the tree and halving-doubling goes to the ring.
  x.halving_doubling_min_bytes = 200;
  EXPECT_EQ(ChooseAllreduceAlgorithm(150, 8, 8, x), AllreduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllreduceAlgorithm(200, 8, 8, x), AllreduceAlgorithm::kHalvingDoubling);
  x.halving_doubling_min_bytes = 101;
  // Shared hosts: hierarchical from 500 bytes on, the flat table below.
  EXPECT_EQ(ChooseAllreduceAlgorithm(500, 8, 2, x), AllreduceAlgorithm::kHierarchical);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 30, 8, 2, x), AllreduceAlgorithm::kHierarchical);
  EXPECT_EQ(ChooseAllreduceAlgorithm(499, 8, 2, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(50, 8, 2, x), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(10, 8, 2, x), AllreduceAlgorithm::kRecursiveDoubling);
  // One host for all, or one rank per host: nothing to gain from the hierarchy.
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 30, 8, 1, x), AllreduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 30, 8, 8, x), AllreduceAlgorithm::kRing);
}

// More ranks than cores on one host: the tree up to small_tree_max_bytes when
// it sends fewer messages than recursive doubling (4 ranks and more).
TEST(AllreduceAutoTest, SmallTreeWhenRanksOutnumberCores) {
  EXPECT_EQ(TreeAllreduceMessages(4), 6);
  EXPECT_EQ(RecursiveDoublingMessages(4), 8);
  EXPECT_EQ(RecursiveDoublingMessages(2), TreeAllreduceMessages(2));
  EXPECT_EQ(RecursiveDoublingMessages(3), TreeAllreduceMessages(3));  // 2 + fold in and out
  EXPECT_EQ(RecursiveDoublingMessages(6), 12);                        // 4 * 2 + 2 * 2
  EXPECT_EQ(RecursiveDoublingMessages(8), 24);
  AllreduceCrossovers x;
  x.small_tree_max_bytes = 64;
  x.recursive_doubling_max_bytes = 128;
  constexpr bool kNoHostMemory = false;
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 4, 1, x, kNoHostMemory, 2), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 8, 1, x, kNoHostMemory, 4), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(65, 4, 1, x, kNoHostMemory, 2), AllreduceAlgorithm::kRecursiveDoubling);
  // Not when the cores suffice, are unknown, or the ranks span hosts.
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 4, 1, x, kNoHostMemory, 4), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 4, 1, x, kNoHostMemory, 0), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 4, 4, x, kNoHostMemory, 2), AllreduceAlgorithm::kRecursiveDoubling);
  // Not at 2 or 3 ranks, where the tree sends as many messages.
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 3, 1, x, kNoHostMemory, 1), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 2, 1, x, kNoHostMemory, 1), AllreduceAlgorithm::kRecursiveDoubling);
  // Host memory still wins.
  EXPECT_EQ(ChooseAllreduceAlgorithm(64, 4, 1, x, true, 2), AllreduceAlgorithm::kSharedMemory);
  // The providers' defaults: net to 64 KiB, tcp;ofi_rxm to 4 MiB, never over shm.
  const AllreduceCrossovers rxm = CrossoversForProvider(FabricProvider::kTcpRxm);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 10, 4, 1, CrossoversForProvider(FabricProvider::kNet), kNoHostMemory, 2),
            AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4 << 20, 4, 1, rxm, kNoHostMemory, 2), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm((4 << 20) + 4, 4, 1, rxm, kNoHostMemory, 2), AllreduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4096, 4, 1, CrossoversForProvider(FabricProvider::kShm), kNoHostMemory, 2),
            AllreduceAlgorithm::kRecursiveDoubling);
}

// The defaults: recursive doubling to 16 KiB, halving-doubling to 2 MiB, the
// ring above (docs/performance.md, "2026-11-22: the default table").
TEST(AllreduceAutoTest, DefaultCrossovers) {
  const AllreduceCrossovers x;
  EXPECT_EQ(ChooseAllreduceAlgorithm(4096, 4, 4, x), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(16 * 1024, 4, 4, x), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4096, 2, 2, x), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(16 * 1024 + 4, 4, 4, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 20, 4, 4, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4 << 20, 4, 4, x), AllreduceAlgorithm::kRing);
  EXPECT_EQ(ChooseAllreduceAlgorithm(1 << 20, 2, 2, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4 << 20, 2, 2, x), AllreduceAlgorithm::kRing);
}

// Timings where `truth` picks the fastest algorithm at every size (it takes
// 100 us; the others 150 to 300 us, differing per algorithm).
std::vector<AllreduceTiming> TimingsWhoseFastestIs(const AllreduceCrossovers& truth) {
  std::vector<AllreduceTiming> out;
  for (int n : {2, 4}) {
    for (size_t bytes = 4096; bytes <= (size_t{64} << 20); bytes *= 4) {
      const AllreduceAlgorithm fastest = ChooseAllreduceAlgorithm(bytes, n, 1, truth);
      double other = 150;
      for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                                   AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRecursiveDoubling}) {
        out.push_back({bytes, n, a, a == fastest ? 100.0 : other});
        other += 50;
      }
    }
  }
  return out;
}

// The fit recovers crossovers that the measurements came from, and keeps the
// base where it already picks the fastest everywhere.
TEST(AllreduceAutoTest, FittedCrossoversPickTheFastestMeasured) {
  AllreduceCrossovers truth;
  truth.recursive_doubling_max_bytes = 64 << 10;
  truth.tree_max_bytes = 256 << 10;
  truth.halving_doubling_min_bytes = 1 << 20;
  truth.halving_doubling_max_bytes = 4 << 20;
  truth.large_tree_min_bytes = 64 << 20;  // the ring at 16 MiB only
  const std::vector<AllreduceTiming> timings = TimingsWhoseFastestIs(truth);
  const AllreduceCrossovers base;  // picks otherwise at 64 KiB, 256 KiB, 4 MiB, 64 MiB
  auto fit = FitAllreduceCrossovers(timings, base);
  ASSERT_TRUE(fit) << fit.error().ToString();
  EXPECT_DOUBLE_EQ(fit->slowdown, 1.0);
  EXPECT_GT(fit->base_slowdown, 1.2);
  for (const AllreduceTiming& t : timings) {
    EXPECT_EQ(ChooseAllreduceAlgorithm(t.bytes, t.world_size, 1, fit->crossovers),
              ChooseAllreduceAlgorithm(t.bytes, t.world_size, 1, truth))
        << t.bytes << " B, " << t.world_size << " ranks";
  }
  EXPECT_EQ(fit->crossovers.hierarchical_min_bytes, base.hierarchical_min_bytes);  // not measurable here
  // The table reads in rule order: no lower bound inside an earlier rule's range.
  EXPECT_GT(fit->crossovers.halving_doubling_min_bytes, fit->crossovers.tree_max_bytes);
  EXPECT_GT(fit->crossovers.large_tree_min_bytes, fit->crossovers.halving_doubling_max_bytes);

  auto kept = FitAllreduceCrossovers(TimingsWhoseFastestIs(base), base);
  ASSERT_TRUE(kept) << kept.error().ToString();
  EXPECT_DOUBLE_EQ(kept->slowdown, 1.0);
  EXPECT_DOUBLE_EQ(kept->base_slowdown, 1.0);
  EXPECT_EQ(kept->crossovers.recursive_doubling_max_bytes, base.recursive_doubling_max_bytes);
  EXPECT_EQ(kept->crossovers.halving_doubling_max_bytes, base.halving_doubling_max_bytes);
  EXPECT_EQ(kept->crossovers.large_tree_min_bytes, base.large_tree_min_bytes);
}

// When the rules cannot express the winners (the ring between two
// halving-doubling sizes), the fit is the closest they allow, never worse
// than the base.
TEST(AllreduceAutoTest, FitIsTheClosestTheRulesAllow) {
  std::vector<AllreduceTiming> timings;
  const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20};
  const AllreduceAlgorithm winners[] = {AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kHalvingDoubling,
                                        AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling};
  for (int i = 0; i < 4; ++i) {
    for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRecursiveDoubling}) {
      timings.push_back({sizes[i], 4, a, a == winners[i] ? 100.0 : (i == 2 ? 101.0 : 400.0)});
    }
  }
  auto fit = FitAllreduceCrossovers(timings, AllreduceCrossovers{});
  ASSERT_TRUE(fit) << fit.error().ToString();
  // Halving-doubling from 64 KiB to 16 MiB costs 1% at 1 MiB only.
  EXPECT_NEAR(fit->slowdown, std::exp(std::log(1.01) / 4), 1e-9);
  EXPECT_LE(fit->slowdown, fit->base_slowdown);
  EXPECT_EQ(ChooseAllreduceAlgorithm(16 << 20, 4, 1, fit->crossovers), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_GT(fit->crossovers.halving_doubling_min_bytes, fit->crossovers.recursive_doubling_max_bytes);
  EXPECT_GT(fit->crossovers.large_tree_min_bytes, fit->crossovers.halving_doubling_max_bytes);
}

// Timings measured on a 2-core host over net (float32, us; docs/performance.md,
// "2026-11-24: more ranks than cores (the small tree)"): at 2 ranks
// recursive doubling wins to 256 KiB, at 4 the tree wins to 64 KiB. Only the
// small-tree rule (more ranks than cores) expresses both; with a core per
// rank it cannot apply and the fit keeps the base's threshold.
TEST(AllreduceAutoTest, FitsTheSmallTreeOnAnOversubscribedHost) {
  struct Row {
    size_t bytes;
    int ranks;
    double ring, tree, hd, rd;
  };
  const Row rows[] = {
      {4096, 2, 18.7, 14.7, 22.2, 10.1},         {16384, 2, 22.0, 21.2, 24.2, 13.5},
      {65536, 2, 32.9, 50.6, 33.5, 29.0},        {262144, 2, 85.8, 92.7, 86.9, 71.6},
      {1048576, 2, 469.7, 198.1, 209.3, 205.2},  {4096, 4, 210.7, 54.2, 147.6, 103.4},
      {16384, 4, 240.1, 76.9, 175.3, 170.0},     {65536, 4, 376.5, 164.5, 236.5, 383.0},
      {262144, 4, 718.3, 658.6, 650.1, 1102.6},  {1048576, 4, 3985.2, 2582.9, 2492.3, 6126.4},
  };
  std::vector<AllreduceTiming> timings;
  for (const Row& r : rows) {
    timings.push_back({r.bytes, r.ranks, AllreduceAlgorithm::kRing, r.ring});
    timings.push_back({r.bytes, r.ranks, AllreduceAlgorithm::kTree, r.tree});
    timings.push_back({r.bytes, r.ranks, AllreduceAlgorithm::kHalvingDoubling, r.hd});
    timings.push_back({r.bytes, r.ranks, AllreduceAlgorithm::kRecursiveDoubling, r.rd});
  }
  auto fit = FitAllreduceCrossovers(timings, AllreduceCrossovers{}, /*host_cores=*/2);
  ASSERT_TRUE(fit) << fit.error().ToString();
  EXPECT_GE(fit->crossovers.small_tree_max_bytes, 65536u);  // 256 KiB at 4 ranks: a tie with halving-doubling
  EXPECT_LT(fit->crossovers.small_tree_max_bytes, size_t{1} << 20);
  for (const Row& r : rows) {
    if (r.bytes > 65536) continue;
    EXPECT_EQ(ChooseAllreduceAlgorithm(r.bytes, r.ranks, 1, fit->crossovers, false, 2),
              r.ranks == 4 ? AllreduceAlgorithm::kTree : AllreduceAlgorithm::kRecursiveDoubling)
        << r.bytes << " B, " << r.ranks << " ranks";
  }
  EXPECT_LT(fit->slowdown, 1.02);
  EXPECT_GT(fit->base_slowdown, 1.05);

  auto roomy = FitAllreduceCrossovers(timings, AllreduceCrossovers{}, /*host_cores=*/8);
  ASSERT_TRUE(roomy) << roomy.error().ToString();
  EXPECT_EQ(roomy->crossovers.small_tree_max_bytes, AllreduceCrossovers{}.small_tree_max_bytes);
  EXPECT_GT(roomy->slowdown, fit->slowdown);
}

// A large-tree rule from the smallest size on, with the rules before it off,
// is not shadowed below halving-doubling: the fit keeps it as found.
TEST(AllreduceAutoTest, FitKeepsALargeTreeRuleThatNothingShadows) {
  std::vector<AllreduceTiming> timings;
  for (size_t bytes : {size_t{4096}, size_t{1} << 20, size_t{16} << 20}) {
    const bool middle = bytes == (size_t{1} << 20);
    timings.push_back({bytes, 4, AllreduceAlgorithm::kRing, 300});
    timings.push_back({bytes, 4, AllreduceAlgorithm::kTree, middle ? 200.0 : 100.0});
    timings.push_back({bytes, 4, AllreduceAlgorithm::kHalvingDoubling, middle ? 100.0 : 200.0});
    timings.push_back({bytes, 4, AllreduceAlgorithm::kRecursiveDoubling, 300});
  }
  AllreduceCrossovers base;
  base.recursive_doubling_max_bytes = 0;
  auto fit = FitAllreduceCrossovers(timings, base);
  ASSERT_TRUE(fit) << fit.error().ToString();
  EXPECT_DOUBLE_EQ(fit->slowdown, 1.0);
  for (const AllreduceTiming& t : timings) {
    if (t.time_us != 100) continue;
    EXPECT_EQ(ChooseAllreduceAlgorithm(t.bytes, 4, 1, fit->crossovers), t.algorithm) << t.bytes << " B";
  }
}

TEST(AllreduceAutoTest, FitRefusesIncompleteOrBadTimings) {
  std::vector<AllreduceTiming> timings = {{4096, 4, AllreduceAlgorithm::kRing, 10},
                                          {4096, 4, AllreduceAlgorithm::kTree, 10},
                                          {4096, 4, AllreduceAlgorithm::kHalvingDoubling, 10}};
  auto missing = FitAllreduceCrossovers(timings, AllreduceCrossovers{});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("recursive-doubling"), std::string::npos) << missing.error().ToString();
  timings.push_back({4096, 4, AllreduceAlgorithm::kRecursiveDoubling, std::nan("")});
  auto bad = FitAllreduceCrossovers(timings, AllreduceCrossovers{});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("recursive-doubling at 4096 B over 4 ranks"), std::string::npos)
      << bad.error().ToString();
}

// Over net the double binary tree takes the large buffers from the ring (it
// won from 4 MiB to 64 MiB at 2 and 4 ranks); elsewhere the defaults.
TEST(AllreduceAutoTest, NetTakesTheTreeAboveHalvingDoubling) {
  const AllreduceCrossovers net = CrossoversForProvider(FabricProvider::kNet);
  EXPECT_EQ(ChooseAllreduceAlgorithm(4096, 4, 4, net), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(2 << 20, 4, 4, net), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm((2 << 20) + 4, 4, 4, net), AllreduceAlgorithm::kTree);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 20, 2, 2, net), AllreduceAlgorithm::kTree);
  // Shared hosts still go hierarchical, and host memory still wins.
  EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 20, 8, 2, net), AllreduceAlgorithm::kHierarchical);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 20, 4, 1, net, /*host_memory=*/true), AllreduceAlgorithm::kSharedMemory);
  // rxm: recursive doubling up to 256 KiB, halving-doubling above it.
  const AllreduceCrossovers rxm = CrossoversForProvider(FabricProvider::kTcpRxm);
  EXPECT_EQ(ChooseAllreduceAlgorithm(256 << 10, 4, 4, rxm), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm((256 << 10) + 4, 4, 4, rxm), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 10, 4, 4, CrossoversForProvider(FabricProvider::kShm)),
            AllreduceAlgorithm::kHalvingDoubling);
  for (FabricProvider provider : {FabricProvider::kTcpRxm, FabricProvider::kShm}) {
    EXPECT_EQ(ChooseAllreduceAlgorithm(64 << 20, 4, 4, CrossoversForProvider(provider)), AllreduceAlgorithm::kRing)
        << ProviderName(provider);
  }
}

TEST(AllreduceAutoTest, NamesRoundTrip) {
  for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling}) {
    auto parsed = ParseAllreduceAlgorithm(AllreduceAlgorithmName(a));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_FALSE(ParseAllreduceAlgorithm("butterfly").has_value());
}

// ---- Every algorithm, world size and length ----

struct Case {
  AllreduceAlgorithm algorithm;
  int n;
  int len_kind;  // 0: empty, 1: one element, 2: 7n+3, 3: 1<<20
};

size_t LengthOf(const Case& c) {
  switch (c.len_kind) {
    case 0: return 0;
    case 1: return 1;
    case 2: return static_cast<size_t>(7 * c.n + 3);
    default: return size_t{1} << 20;
  }
}

class AllreduceSweepTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceSweepTest, SumMatchesClosedForm) {
  const Case c = GetParam();
  AllreduceOptions options;
  options.algorithm = c.algorithm;
  options.deadline = Deadline::AfterSeconds(30);
  CheckFloatAllreduce(c.n, LengthOf(c), options, HostKeysByPairs(c.n));
}

std::vector<Case> SweepCases() {
  std::vector<Case> cases;
  for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kAuto}) {
    for (int n : {1, 2, 3, 5, 8}) {
      for (int len = 0; len < 4; ++len) cases.push_back(Case{a, n, len});
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string algo(AllreduceAlgorithmName(info.param.algorithm));
  algo.erase(std::remove(algo.begin(), algo.end(), '-'), algo.end());
  static const char* kLen[] = {"Empty", "One", "SevenNPlus3", "Large"};
  return algo + "N" + std::to_string(info.param.n) + kLen[info.param.len_kind];
}

INSTANTIATE_TEST_SUITE_P(All, AllreduceSweepTest, ::testing::ValuesIn(SweepCases()), CaseName);

// Tiny segments and windows: many segments per chunk, chunks of one element,
// receives posted one at a time or a few ahead.
TEST(AllreduceTest, SmallSegmentsHitPipelineEdges) {
  for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling}) {
    for (int n : {2, 3, 5, 8}) {
      for (size_t segment : {1u, 2u, 3u}) {
        for (int inflight : {1, 3}) {
          for (size_t len : {static_cast<size_t>(n - 1), static_cast<size_t>(7 * n + 3)}) {
            SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)) + " n=" + std::to_string(n) +
                         " segment=" + std::to_string(segment) +
                         " inflight=" + std::to_string(inflight) + " len=" + std::to_string(len));
            AllreduceOptions options;
            options.algorithm = a;
            options.segment_elems = segment;
            options.inflight_segments = inflight;
            options.deadline = Deadline::AfterSeconds(30);
            CheckFloatAllreduce(n, len, options, HostKeysByPairs(n));
          }
        }
      }
    }
  }
}

// With link delays a send is not complete when the data it carried comes back
// (summed), so receives into regions still being sent from take the staged path.
TEST(AllreduceTest, SlowLinksTakeTheStagedPath) {
  LocalLinkModel link;
  link.latency = std::chrono::microseconds(300);
  link.bytes_per_second = 50e6;
  for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling}) {
    for (int n : {3, 5}) {
      SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)) + " n=" + std::to_string(n));
      AllreduceOptions options;
      options.algorithm = a;
      options.segment_elems = 16;
      options.inflight_segments = 8;
      options.deadline = Deadline::AfterSeconds(30);
      CheckFloatAllreduce(n, 40 * n + 3, options, HostKeysByPairs(n), link);
    }
  }
}

TEST(AllreduceTest, SingleTreeAndDoubleTreeAgree) {
  for (size_t single_tree_max_bytes : {SIZE_MAX, size_t{0}}) {
    AllreduceOptions options;
    options.algorithm = AllreduceAlgorithm::kTree;
    options.single_tree_max_bytes = single_tree_max_bytes;
    options.segment_elems = 4;
    options.deadline = Deadline::AfterSeconds(30);
    CheckFloatAllreduce(5, 7 * 5 + 3, options);
  }
}

TEST(AllreduceTest, HierarchicalWithUnevenAndInterleavedHosts) {
  const std::vector<std::vector<std::string>> layouts = {
      {"a", "a", "b", "b", "b"},       // uneven groups
      {"a", "b", "a", "b", "c"},       // groups not contiguous in rank order
      {"a", "a", "a", "a", "a"},       // one host: no leader ring
      {"a", "b", "c", "d", "e"},       // one rank per host: the ring alone
      {"x", "y", "y", "y", "y", "y", "y", "x"},
  };
  for (const auto& keys : layouts) {
    for (size_t segment : {2u, 64u * 1024u}) {
      AllreduceOptions options;
      options.algorithm = AllreduceAlgorithm::kHierarchical;
      options.segment_elems = segment;
      options.deadline = Deadline::AfterSeconds(30);
      const int n = static_cast<int>(keys.size());
      CheckFloatAllreduce(n, 7 * n + 3, options, keys);
      CheckFloatAllreduce(n, 1000, options, keys);
    }
  }
}

TEST(AllreduceTest, ScalesBeforeAndAfter) {
  const int n = 5;
  const size_t len = 7 * n + 3;
  AllreduceOptions options;
  options.algorithm = AllreduceAlgorithm::kRing;
  options.pre_scale = 2.0f;
  options.post_scale = 1.0f / n;
  options.deadline = Deadline::AfterSeconds(30);
  std::vector<std::vector<float>> results(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    results[r].resize(len);
    for (size_t i = 0; i < len; ++i) results[r][i] = Input(r, i);
    return c.Allreduce(std::span<float>(results[r]), options);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    for (size_t i = 0; i < len; ++i) {
      const float expected = 2.0f * ExpectedSum(n, i) / n;
      // The pre-scaled sum is exact (doubled small integers); post_scale = 1/5
      // is rounded once and the product once: within 2 ulp.
      EXPECT_NEAR(results[r][i], expected, 2 * std::abs(expected) * 1.2e-7f);
    }
  }
}

// ---- FP16 ----

// Inputs near 40000: two of them already overflow FP16 (max 65504), so only the
// pre-divided sum (each input times 1/n) stays finite.
uint16_t HalfInput(int rank, size_t i) {
  return FloatToHalfBits(40000.0f + 2048.0f * static_cast<float>(rank % 3) +
                         256.0f * static_cast<float>(i % 7));
}

TEST(AllreduceTest, HalfWithPreDivisionAvoidsOverflow) {
  for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling}) {
    for (int n : {2, 3, 5, 8}) {
      SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)) + " n=" + std::to_string(n));
      const size_t len = 7 * n + 3;
      for (bool pre_divide : {true, false}) {
        AllreduceOptions options;
        options.algorithm = a;
        options.segment_elems = 4;
        options.pre_scale = pre_divide ? 1.0f / n : 1.0f;
        options.deadline = Deadline::AfterSeconds(30);
        std::vector<std::vector<uint16_t>> results(n);
        auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
          CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, HostKeysByPairs(n)));
          results[r].resize(len);
          for (size_t i = 0; i < len; ++i) results[r][i] = HalfInput(r, i);
          return c.Allreduce(std::span<uint16_t>(results[r]), options);
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
          for (size_t i = 0; i < len; ++i) {
            double sum = 0;
            for (int q = 0; q < n; ++q) sum += HalfBitsToFloat(HalfInput(q, i));
            const float got = HalfBitsToFloat(results[r][i]);
            if (!pre_divide) {
              EXPECT_TRUE(std::isinf(got)) << "undivided sum " << sum << " should overflow";
              continue;
            }
            const double mean = sum / n;
            // Each FP16 rounding is within 2^-11 relative: one per pre-divided
            // input and one per partial sum (at most n-1 on any path), all of
            // values no larger than the final sum since every input is positive.
            EXPECT_NEAR(got, mean, (n + 1) * std::ldexp(1.0, -11) * mean)
                << "rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

// Recursive doubling: partners add each other's buffers (a + b on one side,
// b + a on the other, the same bits), so inexact inputs still give one result
// bit for bit on every rank, in FP32 and in FP16.
TEST(AllreduceTest, RecursiveDoublingGivesTheSameBitsEverywhere) {
  auto value = [](int r, size_t i) {
    return 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i % 101) +
           (r % 2 ? 3.0f : 1e-4f);
  };
  for (int n : {3, 5, 8}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t len = 7 * n + 3;
    AllreduceOptions options;
    options.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
    options.segment_elems = 4;
    options.deadline = Deadline::AfterSeconds(30);
    std::vector<std::vector<float>> full(n);
    std::vector<std::vector<uint16_t>> half(n);
    auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
      full[r].resize(len);
      half[r].resize(len);
      for (size_t i = 0; i < len; ++i) {
        full[r][i] = value(r, i);
        half[r][i] = FloatToHalfBits(value(r, i));
      }
      CHORUS_RETURN_IF_ERROR(c.Allreduce(std::span<float>(full[r]), options));
      return c.Allreduce(std::span<uint16_t>(half[r]), options);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
      EXPECT_EQ(full[r], full[0]) << "rank " << r << " (fp32) differs from rank 0";
      EXPECT_EQ(half[r], half[0]) << "rank " << r << " (fp16) differs from rank 0";
      for (size_t i = 0; i < len; ++i) {
        double sum = 0;
        for (int q = 0; q < n; ++q) sum += value(q, i);
        // FP32: n - 1 roundings of partial sums no larger than the total (all
        // inputs positive), each within 2^-24 relative.
        ASSERT_NEAR(full[r][i], sum, n * std::ldexp(1.0, -24) * sum) << i;
        // FP16: the inputs and n - 1 partial sums each rounded within 2^-11.
        ASSERT_NEAR(HalfBitsToFloat(half[r][i]), sum, 2 * n * std::ldexp(1.0, -11) * sum) << i;
      }
    }
  }
}

// ---- Failures ----

// Rank n-1 never calls the collective: everyone else fails by the deadline
// with an error that names it.
TEST(AllreduceTest, MissingPeerFailsEveryoneByTheDeadline) {
  for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                 AllreduceAlgorithm::kRecursiveDoubling}) {
    for (int n : {2, 5}) {
      SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)) + " n=" + std::to_string(n));
      const auto timeout = std::chrono::milliseconds(200);
      const auto start = Clock::now();
      auto statuses = RunRanks(n, n - 1, [&](int r, Transport& t) -> Status {
        CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, HostKeysByPairs(n)));
        AllreduceOptions options;
        options.algorithm = a;
        options.segment_elems = 8;
        options.deadline = Deadline::After(timeout);
        std::vector<float> data(100, 1.0f);
        return c.Allreduce(std::span<float>(data), options);
      });
      const auto elapsed = Clock::now() - start;
      // Generous slack over the deadline for thread start-up on a loaded CI box.
      EXPECT_LT(elapsed, timeout + std::chrono::seconds(5));
      const std::string missing = "rank " + std::to_string(n - 1);
      for (int r = 0; r < n - 1; ++r) {
        const Status& s = statuses[r];
        ASSERT_FALSE(s.ok()) << "rank " << r;
        EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded ||
                    s.code() == StatusCode::kUnavailable)
            << s.ToString();
        EXPECT_NE(s.message().find(missing), std::string::npos)
            << "rank " << r << ": " << s.ToString();
      }
    }
  }
}

TEST(AllreduceTest, KilledPeerGivesUnavailableNamingIt) {
  const int n = 3;
  LocalHubOptions hub_options;
  hub_options.world_size = n;
  auto hub = LocalHub::Create(hub_options);
  auto transports = hub->MakeAll();
  hub->Kill(2);
  std::vector<Status> out(n - 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n - 1; ++r) {
    threads.emplace_back([&, r] {
      auto c = Collective::Create(*transports[r]);
      if (!c) {
        out[r] = c.error();
        return;
      }
      AllreduceOptions options;
      options.algorithm = AllreduceAlgorithm::kRing;
      options.deadline = Deadline::AfterSeconds(1);
      std::vector<float> data(10, 1.0f);
      out[r] = c->Allreduce(std::span<float>(data), options);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n - 1; ++r) {
    ASSERT_FALSE(out[r].ok());
    EXPECT_NE(out[r].message().find("rank 2"), std::string::npos) << out[r].ToString();
  }
  // Rank 1 sends to the dead rank 2 first thing: Unavailable, not a timeout.
  EXPECT_EQ(out[1].code(), StatusCode::kUnavailable) << out[1].ToString();
}

// Segments are bytes by default: a float16 buffer moves in as many messages
// as a float32 buffer of the same size (before, twice as many), for every
// algorithm that segments.
TEST(AllreduceTest, HalfAndFloatBuffersOfOneSizeSendAsManyMessages) {
  constexpr int kN = 4;
  constexpr size_t kBytes = size_t{1} << 20;
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
                               AllreduceAlgorithm::kTree, AllreduceAlgorithm::kRecursiveDoubling}) {
    SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)));
    std::vector<uint64_t> float_msgs(kN), half_msgs(kN);
    auto statuses = RunRanks(kN, kN, [&](int r, Transport& t) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
      AllreduceOptions options;
      options.algorithm = a;
      options.identify_missing_peers = false;
      std::vector<float> f(kBytes / sizeof(float), 1.0f);
      const uint64_t before = t.Stats().messages_sent;
      CHORUS_RETURN_IF_ERROR(c.Allreduce(std::span<float>(f), options));
      float_msgs[r] = t.Stats().messages_sent - before;
      std::vector<uint16_t> h(kBytes / sizeof(uint16_t), FloatToHalfBits(1.0f));
      const uint64_t middle = t.Stats().messages_sent;
      options.tag_base += kTagsPerCollective;
      CHORUS_RETURN_IF_ERROR(c.Allreduce(std::span<uint16_t>(h), options));
      half_msgs[r] = t.Stats().messages_sent - middle;
      return Status::Ok();
    });
    for (int r = 0; r < kN; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_GT(float_msgs[r], 0u) << "rank " << r;
      EXPECT_EQ(half_msgs[r], float_msgs[r]) << "rank " << r;
    }
  }
}

// A transport that logs the order of its posts ('r' receive, 's' send, and the
// tag) and passes them on.
class PostOrderTransport final : public testing::ForwardingTransport {
 public:
  struct Post {
    char kind;
    Tag tag;
  };
  using ForwardingTransport::ForwardingTransport;
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    posts.push_back({'s', tag});
    return inner().Isend(dest, tag, data);
  }
  Result<RequestPtr> Irecv(Rank source, Tag tag, std::span<std::byte> data) override {
    posts.push_back({'r', tag});
    return inner().Irecv(source, tag, data);
  }

  std::vector<Post> posts;
};

// Whether the first receive with `tag` was posted before the first send with it
// (true when the tag has no send or no receive: a fold step's one direction).
bool ReceivePostedBeforeSend(const std::vector<PostOrderTransport::Post>& posts, Tag tag) {
  int first_send = -1, first_recv = -1;
  for (int i = 0; i < static_cast<int>(posts.size()); ++i) {
    if (posts[i].tag != tag) continue;
    int& first = posts[i].kind == 's' ? first_send : first_recv;
    if (first < 0) first = i;
  }
  return first_send < 0 || first_recv < 0 || first_recv < first_send;
}

// Data that arrives before its receive is posted takes the provider's slow path
// (net leaves it in the socket, rxm bounces or rendezvouses it), so every
// halving-doubling step, and the ring's first, posts receives before sending.
TEST(AllreduceTest, ReceivesArePostedBeforeTheSendsOfTheirStep) {
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRing}) {
    for (int n : {2, 4, 5}) {
      SCOPED_TRACE(std::string(AllreduceAlgorithmName(a)) + " on " + std::to_string(n));
      std::vector<std::vector<PostOrderTransport::Post>> posts(n);
      auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
        PostOrderTransport logged(t);
        CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(logged));
        AllreduceOptions options;
        options.algorithm = a;
        options.identify_missing_peers = false;
        options.segment_bytes = 4096;
        std::vector<float> data(10000);
        for (size_t i = 0; i < data.size(); ++i) data[i] = Input(r, i);
        Status s = c.Allreduce(std::span<float>(data), options);
        posts[r] = logged.posts;
        return s;
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
        std::set<Tag> tags;
        for (const auto& p : posts[r]) tags.insert(p.tag);
        if (a == AllreduceAlgorithm::kRing) {
          const Tag step0 = CollectiveTag(AllreduceOptions{}.tag_base,
                                          CollectivePhase::kRingReduceScatter, 0);
          ASSERT_EQ(tags.count(step0), 1u);
          EXPECT_TRUE(ReceivePostedBeforeSend(posts[r], step0)) << "rank " << r;
          continue;
        }
        for (Tag tag : tags) {
          EXPECT_TRUE(ReceivePostedBeforeSend(posts[r], tag)) << "rank " << r << " tag " << tag;
        }
      }
    }
  }
}

TEST(AllreduceTest, RejectsNoInflightSegment) {
  auto statuses = RunRanks(1, 1, [](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    AllreduceOptions options;
    options.inflight_segments = 0;
    std::vector<float> data(3, 1.0f);
    return c.Allreduce(std::span<float>(data), options);
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kInvalidArgument);
}

TEST(AllreduceTest, OversubscribedOnlyWithEveryRankOnOneHostOfFewerCores) {
  EXPECT_TRUE(Oversubscribed(4, 1, 2));
  EXPECT_FALSE(Oversubscribed(2, 1, 2));
  EXPECT_FALSE(Oversubscribed(4, 2, 2));  // several hosts: their cores are not known here
  EXPECT_FALSE(Oversubscribed(4, 1, 0));  // unknown core count
}

// Two all-reduces at once on every rank, with tag ranges kTagsPerCollective apart.
TEST(AllreduceTest, ConcurrentCallsWithDisjointTagsDoNotMix) {
  const int n = 5;
  const size_t len = 7 * n + 3;
  std::vector<std::vector<float>> a(n), b(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    a[r].resize(len);
    b[r].resize(len);
    for (size_t i = 0; i < len; ++i) {
      a[r][i] = Input(r, i);
      b[r][i] = 10.0f * Input(r, i);
    }
    Status sb;
    std::thread second([&] {
      AllreduceOptions options;
      options.algorithm = AllreduceAlgorithm::kTree;
      options.segment_elems = 3;
      options.tag_base = kTagsPerCollective;
      options.deadline = Deadline::AfterSeconds(30);
      sb = c.Allreduce(std::span<float>(b[r]), options);
    });
    AllreduceOptions options;
    options.algorithm = AllreduceAlgorithm::kRing;
    options.segment_elems = 3;
    options.deadline = Deadline::AfterSeconds(30);
    Status sa = c.Allreduce(std::span<float>(a[r]), options);
    second.join();
    return sa.ok() ? sb : sa;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(a[r][i], ExpectedSum(n, i));
      ASSERT_EQ(b[r][i], 10.0f * ExpectedSum(n, i));
    }
  }
}

// Over libfabric (tcp;ofi_rxm, and net) sends may complete only when the peer has posted
// its receive (rendezvous), which the local hub never does: the algorithms must
// still make progress and leave no region reused early. (shm is left out while
// it can deliver two messages of one tag out of order under pre-posted receives.)
TEST(AllreduceTest, RunsOverLibfabricTcp) {
  for (auto kind : {testing::TransportKind::kTcp, testing::TransportKind::kNet}) {
    const int n = 3;
    auto world = testing::MakeWorld(kind, n);
    if (!world) {
      GTEST_SKIP() << testing::KindName(kind) << " unavailable: " << world.error().ToString();
    }
    uint32_t call = 0;
    for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                   AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kHierarchical,
                   AllreduceAlgorithm::kRecursiveDoubling}) {
      for (size_t len : {size_t{7 * n + 3}, size_t{1} << 18}) {
        SCOPED_TRACE(testing::KindName(kind) + " " + std::string(AllreduceAlgorithmName(a)) +
                     " len=" + std::to_string(len));
        const Tag tag_base = ++call * kTagsPerCollective;
        std::vector<std::vector<float>> data(n);
        std::vector<Status> statuses(n);
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            auto c = Collective::Create((*world)[r], {"a", "b", "b"});
            if (!c) {
              statuses[r] = c.error();
              return;
            }
            data[r].resize(len);
            for (size_t i = 0; i < len; ++i) data[r][i] = Input(r, i);
            AllreduceOptions options;
            options.algorithm = a;
            options.segment_elems = len < 1000 ? 4 : 16 * 1024;
            options.tag_base = tag_base;
            options.deadline = Deadline::AfterSeconds(30);
            statuses[r] = c->Allreduce(std::span<float>(data[r]), options);
          });
        }
        for (auto& t : threads) t.join();
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
          for (size_t i = 0; i < len; ++i) ASSERT_EQ(data[r][i], ExpectedSum(n, i)) << i;
        }
      }
    }
  }
}

// ---- Broadcast and barrier ----

TEST(BroadcastTest, EveryRootEveryLength) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (int root = 0; root < n; ++root) {
      for (size_t len : {0u, 1u, 37u, 4096u}) {
        std::vector<std::vector<std::byte>> bufs(n);
        auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
          CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
          bufs[r].resize(len);
          for (size_t i = 0; i < len; ++i) {
            bufs[r][i] = static_cast<std::byte>(r == root ? (i * 31 + 7) & 0xFF : 0);
          }
          CollectiveOptions options;
          options.segment_bytes = 16;
          options.deadline = Deadline::AfterSeconds(30);
          return c.Broadcast(std::span<std::byte>(bufs[r]), root, options);
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
          for (size_t i = 0; i < len; ++i) {
            ASSERT_EQ(bufs[r][i], static_cast<std::byte>((i * 31 + 7) & 0xFF))
                << "n=" << n << " root=" << root << " rank " << r << " byte " << i;
          }
        }
      }
    }
  }
}

TEST(BarrierTest, NobodyLeavesBeforeTheLastArrives) {
  for (int n : {1, 2, 3, 5, 8}) {
    std::atomic<int> arrived{0};
    std::vector<int> seen(n, -1);
    auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
      // The last rank arrives late; nobody may pass before it.
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      arrived.fetch_add(1);
      CollectiveOptions options;
      options.deadline = Deadline::AfterSeconds(30);
      Status s = c.Barrier(options);
      seen[r] = arrived.load();
      return s;
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_EQ(seen[r], n) << "rank " << r << " left the barrier early";
    }
  }
}

TEST(BarrierTest, MissingPeerIsNamed) {
  const int n = 4;
  auto statuses = RunRanks(n, n - 1, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CollectiveOptions options;
    options.deadline = Deadline::After(std::chrono::milliseconds(200));
    return c.Barrier(options);
  });
  for (int r = 0; r < n - 1; ++r) {
    ASSERT_EQ(statuses[r].code(), StatusCode::kDeadlineExceeded) << statuses[r].ToString();
    EXPECT_NE(statuses[r].message().find("rank 3"), std::string::npos) << statuses[r].ToString();
  }
}

}  // namespace
}  // namespace chorus::gossip
