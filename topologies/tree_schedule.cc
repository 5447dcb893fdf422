// Binary and double binary trees. See tree_schedule.h.
#include "topologies/tree_schedule.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace chorus::topologies {
namespace {

Status CheckCount(int n) {
  if (n < 1) return InvalidArgument("tree: " + std::to_string(n) + " ranks; need at least 1");
  return Status::Ok();
}

// The position in [lo, hi] (1-based, lo <= hi) with the most trailing zero bits; unique,
// since two such numbers would have a multiple of the next power of two between them.
int MostTrailingZeros(int lo, int hi) {
  for (int bit = 30; bit > 0; --bit) {
    const int candidate = (hi >> bit) << bit;
    if (candidate >= lo) return candidate;
  }
  return hi;  // no even number in [lo, hi]: then lo == hi and it is odd
}

// In-order tree over positions 1..n, mapped to ranks by `rank_of`.
Tree InOrderTree(int n, const std::function<int(int)>& rank_of) {
  Tree tree;
  tree.nodes.resize(n);
  // Builds the subtree over positions [lo, hi] and returns its root position.
  std::function<int(int, int, int)> build = [&](int lo, int hi, int parent_position) -> int {
    const int position = MostTrailingZeros(lo, hi);
    const int rank = rank_of(position);
    tree.nodes[rank].parent = parent_position == 0 ? -1 : rank_of(parent_position);
    if (lo < position) tree.nodes[rank].children.push_back(rank_of(build(lo, position - 1, position)));
    if (position < hi) tree.nodes[rank].children.push_back(rank_of(build(position + 1, hi, position)));
    std::sort(tree.nodes[rank].children.begin(), tree.nodes[rank].children.end());
    return position;
  };
  tree.root = rank_of(build(1, n, 0));
  return tree;
}

// Root 0, rank r > 0 hung off parent_of(r) < r; children in ascending order.
template <typename ParentOf>
Result<Tree> TreeRootedAtZero(int n, ParentOf parent_of) {
  CHORUS_RETURN_IF_ERROR(CheckCount(n));
  Tree tree;
  tree.root = 0;
  tree.nodes.resize(n);
  for (int r = 1; r < n; ++r) {
    tree.nodes[r].parent = parent_of(r);
    tree.nodes[tree.nodes[r].parent].children.push_back(r);
  }
  return tree;
}

}  // namespace

Result<Tree> MakeBinaryTree(int n) {
  return TreeRootedAtZero(n, [](int r) { return (r - 1) / 2; });
}

Result<Tree> MakeFlatTree(int n) {
  return TreeRootedAtZero(n, [](int) { return 0; });
}

Result<DoubleBinaryTree> MakeDoubleBinaryTree(int n) {
  CHORUS_RETURN_IF_ERROR(CheckCount(n));
  DoubleBinaryTree trees;
  trees.first = InOrderTree(n, [](int position) { return position - 1; });
  if (n % 2 == 0) {
    trees.second = InOrderTree(n, [n](int position) { return n - position; });
  } else {
    trees.second = InOrderTree(n, [n](int position) { return position % n; });
  }
  return trees;
}

}  // namespace chorus::topologies
