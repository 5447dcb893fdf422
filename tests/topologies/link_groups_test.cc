// Tests of grouping ranks by measured link costs: two or three sites found
// across a clear gap, noise inside a site ignored, one group without a gap,
// and errors that name the problem.
#include "topologies/link_groups.h"

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

}  // namespace
}  // namespace chorus::topologies
