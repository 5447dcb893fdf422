// Tests for the binary and double binary trees: each is a spanning tree with
// consistent links and logarithmic depth, the double tree's interior ranks are leaves
// of the other tree, and a reduce-then-broadcast over them gives the exact sum.
#include "topologies/tree_schedule.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "topologies/chunking.h"

namespace chorus::topologies {
namespace {

// Checks links both ways, a single root, every rank reached; returns the depth (edges
// on the longest root-to-leaf path).
int CheckTree(const Tree& tree, int n, size_t max_children = 2) {
  EXPECT_EQ(static_cast<int>(tree.nodes.size()), n);
  EXPECT_EQ(tree.nodes[tree.root].parent, -1);
  for (int r = 0; r < n; ++r) {
    const TreeLinks& links = tree.nodes[r];
    EXPECT_LE(links.children.size(), max_children);
    if (r != tree.root) {
      EXPECT_GE(links.parent, 0) << "rank " << r << " has no parent";
      if (links.parent < 0) continue;
      const auto& siblings = tree.nodes[links.parent].children;
      EXPECT_NE(std::find(siblings.begin(), siblings.end(), r), siblings.end())
          << "rank " << r << " missing from its parent's children";
    }
    for (int c : links.children) EXPECT_EQ(tree.nodes[c].parent, r);
  }
  std::vector<int> depth(n, -1);
  std::function<void(int, int)> visit = [&](int r, int d) {
    depth[r] = d;
    for (int c : tree.nodes[r].children) visit(c, d + 1);
  };
  visit(tree.root, 0);
  int max_depth = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_GE(depth[r], 0) << "rank " << r << " not reachable from the root";
    max_depth = std::max(max_depth, depth[r]);
  }
  return max_depth;
}

int FloorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// Reduce up then broadcast down the tree for elements `range`; rank r holds
// (r + 1) * 1000 + i. Returns nothing; checks the exact sum at every rank.
void TreeAllreduce(const Tree& tree, std::vector<std::vector<double>>& data, Range range) {
  std::function<void(int)> reduce = [&](int r) {
    for (int c : tree.nodes[r].children) {
      reduce(c);
      for (int64_t i = range.begin; i < range.end; ++i) data[r][i] += data[c][i];
    }
  };
  std::function<void(int)> broadcast = [&](int r) {
    for (int c : tree.nodes[r].children) {
      for (int64_t i = range.begin; i < range.end; ++i) data[c][i] = data[r][i];
      broadcast(c);
    }
  };
  reduce(tree.root);
  broadcast(tree.root);
}

std::vector<std::vector<double>> TreeInputs(int n, int64_t length) {
  std::vector<std::vector<double>> data(n, std::vector<double>(length));
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) data[r][i] = (r + 1) * 1000.0 + static_cast<double>(i);
  }
  return data;
}

void ExpectSums(const std::vector<std::vector<double>>& data, int64_t length) {
  const int n = static_cast<int>(data.size());
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) {
      // Integer values: the sum is exact in double.
      ASSERT_EQ(data[r][i], 1000.0 * n * (n + 1) / 2 + static_cast<double>(n * i))
          << "n = " << n << " rank " << r << " element " << i;
    }
  }
}

TEST(TreeSchedule, BinaryTreeIsAHeap) {
  for (int n = 1; n <= 20; ++n) {
    auto tree = MakeBinaryTree(n);
    ASSERT_TRUE(tree);
    EXPECT_EQ(tree->root, 0);
    EXPECT_EQ(CheckTree(*tree, n), FloorLog2(n)) << "n = " << n;
    for (int r = 1; r < n; ++r) EXPECT_EQ(tree->nodes[r].parent, (r - 1) / 2);
  }
}

TEST(TreeSchedule, FlatTreeHangsEveryRankOffTheRoot) {
  for (int n = 1; n <= 6; ++n) {
    auto tree = MakeFlatTree(n);
    ASSERT_TRUE(tree);
    EXPECT_EQ(tree->root, 0);
    EXPECT_EQ(CheckTree(*tree, n, /*max_children=*/n), n > 1 ? 1 : 0) << "n = " << n;
    EXPECT_EQ(tree->nodes[0].children.size(), static_cast<size_t>(n - 1));
    if (n <= 3) {
      auto binary = MakeBinaryTree(n);
      for (int r = 0; r < n; ++r) EXPECT_EQ(tree->nodes[r].children, binary->nodes[r].children) << n;
    }
  }
  EXPECT_FALSE(MakeFlatTree(0));
}

TEST(TreeSchedule, DoubleBinaryTreeInteriorsAreLeavesOfTheOther) {
  for (int n = 1; n <= 40; ++n) {
    auto trees = MakeDoubleBinaryTree(n);
    ASSERT_TRUE(trees);
    // In-order trees over 1..n are as shallow as a heap.
    EXPECT_EQ(CheckTree(trees->first, n), FloorLog2(n)) << "n = " << n;
    EXPECT_EQ(CheckTree(trees->second, n), FloorLog2(n)) << "n = " << n;
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(!trees->first.IsLeaf(r) && !trees->second.IsLeaf(r))
          << "n = " << n << ": rank " << r << " is interior in both trees";
    }
    // Tree one's interior ranks are the odd ones; tree two's the even ones (not 0 for odd n).
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(trees->first.IsLeaf(r), r % 2 == 0) << "n = " << n << " rank " << r;
    }
  }
}

TEST(TreeSchedule, AllreduceOverTreesGivesTheSum) {
  for (int n : {1, 2, 3, 5, 8, 12}) {
    for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{7} * n + 3, int64_t{1000}}) {
      auto data = TreeInputs(n, length);
      TreeAllreduce(*MakeBinaryTree(n), data, Range{0, length});
      ASSERT_NO_FATAL_FAILURE(ExpectSums(data, length));
      data = TreeInputs(n, length);
      TreeAllreduce(*MakeFlatTree(n), data, Range{0, length});
      ASSERT_NO_FATAL_FAILURE(ExpectSums(data, length));
      // Double tree: first half on tree one, second half on tree two.
      auto halves = *PartitionChunks(length, 2);
      auto trees = *MakeDoubleBinaryTree(n);
      data = TreeInputs(n, length);
      TreeAllreduce(trees.first, data, halves[0]);
      TreeAllreduce(trees.second, data, halves[1]);
      ASSERT_NO_FATAL_FAILURE(ExpectSums(data, length));
    }
  }
}

TEST(TreeSchedule, RejectsEmptyCluster) {
  EXPECT_FALSE(MakeBinaryTree(0));
  EXPECT_FALSE(MakeDoubleBinaryTree(-3));
}

}  // namespace
}  // namespace chorus::topologies
