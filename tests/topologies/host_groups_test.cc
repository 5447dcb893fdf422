// Tests for host grouping: leaders are the lowest rank per host, groups ordered by
// leader, members ascending, local ranks, and errors on bad input.
#include "topologies/host_groups.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

TEST(HostGroups, GroupsByKeyWithLowestRankLeading) {
  auto groups = GroupByHost({"b", "a", "b", "c", "a", "b"});
  ASSERT_TRUE(groups) << groups.error().ToString();
  ASSERT_EQ(groups->NumGroups(), 3);
  EXPECT_EQ(groups->host_keys, (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(groups->leaders, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(groups->members[0], (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(groups->members[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(groups->members[2], (std::vector<int>{3}));
  EXPECT_EQ(groups->group_of_rank, (std::vector<int>{0, 1, 0, 2, 1, 0}));
  EXPECT_EQ(groups->local_rank, (std::vector<int>{0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(groups->LeaderOf(5), 0);
  EXPECT_EQ(groups->LeaderOf(4), 1);
  EXPECT_TRUE(groups->IsLeader(3));
  EXPECT_FALSE(groups->IsLeader(2));
}

TEST(HostGroups, OneHostAndAllDistinct) {
  auto one = GroupByHost(std::vector<std::string>(5, "node-a"));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->NumGroups(), 1);
  EXPECT_EQ(one->leaders, std::vector<int>{0});
  EXPECT_EQ(one->members[0], (std::vector<int>{0, 1, 2, 3, 4}));
  auto distinct = GroupByHost({"h0", "h1", "h2"});
  ASSERT_TRUE(distinct);
  EXPECT_EQ(distinct->leaders, (std::vector<int>{0, 1, 2}));
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(distinct->IsLeader(r));
}

TEST(HostGroups, RejectsEmptyInput) {
  EXPECT_FALSE(GroupByHost({}));
  auto blank = GroupByHost({"a", ""});
  ASSERT_FALSE(blank);
  EXPECT_NE(blank.error().message().find("rank 1"), std::string::npos);
}


TEST(LinkAwareOrder, AlternatingSitesRingCrossesEachBoundaryTwice) {
  // 8 ranks alternating between two sites: rank order crosses on every edge.
  std::vector<std::string> sites, hosts;
  for (int r = 0; r < 8; ++r) {
    sites.push_back(r % 2 == 0 ? "lab" : "home");
    hosts.push_back("h" + std::to_string(r));
  }
  std::vector<int> rank_order{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(RingCrossings(rank_order, sites), 8);
  auto order = LinkAwareOrder(sites, hosts);
  ASSERT_TRUE(order) << order.error().ToString();
  EXPECT_EQ(*order, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(RingCrossings(*order, sites), 2);
}

TEST(LinkAwareOrder, EverySiteEntersAndLeavesOnceWithHostsTogether) {
  // Three sites of uneven size, hosts shared by two ranks, keys scattered.
  const std::vector<std::string> sites{"c", "a", "b", "a", "c", "b", "a", "c", "a"};
  const std::vector<std::string> hosts{"c1", "a1", "b1", "a2", "c1", "b1", "a1", "c2", "a2"};
  auto order = LinkAwareOrder(sites, hosts);
  ASSERT_TRUE(order) << order.error().ToString();
  EXPECT_EQ(*order, (std::vector<int>{0, 4, 7, 1, 6, 3, 8, 2, 5}));
  EXPECT_EQ(RingCrossings(*order, sites), 3);  // one edge into each site, one out
  for (const std::string& site : {"a", "b", "c"}) {
    int out = 0, in = 0;
    for (size_t i = 0; i < order->size(); ++i) {
      const std::string& from = sites[(*order)[i]];
      const std::string& to = sites[(*order)[(i + 1) % order->size()]];
      if (from != to && from == site) ++out;
      if (from != to && to == site) ++in;
    }
    EXPECT_EQ(out, 1) << site;
    EXPECT_EQ(in, 1) << site;
  }
  EXPECT_EQ(RingCrossings(*order, hosts), 5);  // each host's ranks adjacent
}

TEST(LinkAwareOrder, OneSiteKeepsRankOrderAndErrorsNameTheProblem) {
  auto same = LinkAwareOrder({"s", "s", "s"}, {"h0", "h1", "h2"});
  ASSERT_TRUE(same);
  EXPECT_EQ(*same, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(RingCrossings(*same, {"s", "s", "s"}), 0);
  auto uneven = LinkAwareOrder({"s", "s"}, {"h0"});
  ASSERT_FALSE(uneven);
  EXPECT_NE(uneven.error().message().find("2 site keys for 1 host keys"), std::string::npos);
  auto empty = LinkAwareOrder({"s", ""}, {"h0", "h1"});
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("rank 1"), std::string::npos);
}

}  // namespace
}  // namespace chorus::topologies
