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

}  // namespace
}  // namespace chorus::topologies
