// Tests of grouping ranks by measured link costs: two or three sites found
// across a clear gap, noise inside a site ignored, one group without a gap,
// and errors that name the problem.
#include "topologies/link_groups.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

// Costs of n ranks whose pair (i, j) costs `near` inside a site and `far`
// between sites, times a small spread that varies with the pair.
std::vector<double> Costs(const std::vector<int>& site, double near, double far) {
  const int n = static_cast<int>(site.size());
  std::vector<double> cost(static_cast<size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double spread = 1.0 + 0.1 * ((i * 7 + j * 3) % 5);  // up to 1.4x
      cost[static_cast<size_t>(i * n + j)] = (site[i] == site[j] ? near : far) * spread;
    }
  }
  return cost;
}

TEST(LinkGroups, FindsTwoAlternatingSitesAcrossTheGap) {
  const std::vector<int> site{0, 1, 0, 1, 0, 1, 0, 1};
  auto groups = GroupByLinkCost(Costs(site, 0.5e-3, 20e-3), 8, 4.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->groups, 2);
  EXPECT_EQ(groups->group_of_rank, site);
  EXPECT_GT(groups->gap, 20.0);
  EXPECT_GT(groups->threshold, 0.7e-3);
  EXPECT_LT(groups->threshold, 20e-3);
}

TEST(LinkGroups, ThreeUnevenSitesNumberedByTheirLowestRank) {
  const std::vector<int> site{2, 0, 0, 1, 2, 1, 0};
  auto groups = GroupByLinkCost(Costs(site, 1e-3, 50e-3), 7, 4.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->groups, 3);
  EXPECT_EQ(groups->group_of_rank, (std::vector<int>{0, 1, 1, 2, 0, 2, 1}));
}

TEST(LinkGroups, NoGapIsOneGroup) {
  const std::vector<int> site{0, 0, 0, 0, 0};
  auto groups = GroupByLinkCost(Costs(site, 1e-3, 1e-3), 5, 4.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->groups, 1);
  EXPECT_EQ(groups->group_of_rank, (std::vector<int>(5, 0)));
  EXPECT_LT(groups->gap, 4.0);
  auto alone = GroupByLinkCost({0.0}, 1, 4.0);
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->groups, 1);
}

TEST(LinkGroups, BadCostsAreNamed) {
  auto size = GroupByLinkCost({1, 2, 3}, 2, 4.0);
  ASSERT_FALSE(size);
  EXPECT_NE(size.error().message().find("3 costs for 2 ranks"), std::string::npos);
  std::vector<double> cost = Costs({0, 0, 1}, 1e-3, 1e-2);
  cost[1 * 3 + 2] = -1.0;
  cost[2 * 3 + 1] = -1.0;
  auto negative = GroupByLinkCost(cost, 3, 4.0);
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.error().message().find("ranks 1 and 2"), std::string::npos) << negative.error().message();
  EXPECT_FALSE(GroupByLinkCost(Costs({0, 1}, 1, 2), 2, 1.0));
}

// Costs spread as on a loaded host: log-uniform over [lo, hi) inside a site
// and [far_lo, far_hi) between sites, from a fixed sequence.
std::vector<double> SpreadCosts(const std::vector<int>& site, double lo, double hi, double far_lo, double far_hi) {
  const int n = static_cast<int>(site.size());
  std::vector<double> cost(static_cast<size_t>(n * n), 0.0);
  uint64_t x = 12345;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u = static_cast<double>(x >> 11) / 9007199254740992.0;
      const bool near = site[i] == site[j];
      const double a = near ? lo : far_lo, b = near ? hi : far_hi;
      const double c = a * std::pow(b / a, u);
      cost[static_cast<size_t>(i * n + j)] = c;
      cost[static_cast<size_t>(j * n + i)] = c;
    }
  }
  return cost;
}

TEST(LinkGroups, SitesOnALoadedHostWhereNoSingleStepStandsOut) {
  // As measured under a test suite's load: 0.6 to 4 ms inside, 12 to 45 ms
  // between: the largest step between consecutive costs is under 4x.
  const std::vector<int> site{0, 1, 0, 1, 0, 1, 0, 1};
  auto groups = GroupByLinkCost(SpreadCosts(site, 0.6e-3, 4e-3, 12e-3, 45e-3), 8, 4.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->group_of_rank, site);
  EXPECT_GE(groups->gap, 4.0);
}

TEST(LinkGroups, SlowPairsInsideASiteDoNotMoveTheGroups) {
  // As a clean-clone run measured: most pairs 0.6 to 4 ms inside and 30 to
  // 90 ms across, but a few inside at 35 ms: no clean step at the split
  // (a first version also asked for one, 1.5x, and found one site).
  const std::vector<int> site{0, 1, 0, 1, 0, 1, 0, 1};
  std::vector<double> cost = SpreadCosts(site, 0.6e-3, 4e-3, 30e-3, 90e-3);
  for (auto [i, j] : {std::pair{0, 2}, std::pair{1, 7}, std::pair{4, 6}}) {
    cost[static_cast<size_t>(i * 8 + j)] = cost[static_cast<size_t>(j * 8 + i)] = 35e-3;
  }
  auto groups = GroupByLinkCost(cost, 8, 3.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->group_of_rank, site);
  EXPECT_GE(groups->gap, 3.0);
}

TEST(LinkGroups, OneSiteSpreadOverADecadeStaysOne) {
  const std::vector<int> site(8, 0);
  auto groups = GroupByLinkCost(SpreadCosts(site, 0.5e-3, 5e-3, 1, 1), 8, 4.0);
  ASSERT_TRUE(groups) << groups.error().ToString();
  EXPECT_EQ(groups->groups, 1) << "gap " << groups->gap << ", step " << groups->step;
}

}  // namespace
}  // namespace chorus::topologies
