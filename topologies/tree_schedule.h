// Trees for reduce-then-broadcast all-reduce: a binary tree and NCCL's double binary
// tree.
//
// A tree all-reduce reduces up (each rank adds its children's partial sums and sends
// the result to its parent) and broadcasts down from the root. In one binary tree the
// leaves only send, so half the ranks leave their links idle; the double binary tree
// (Sanders, Speck and Traeff 2009; NCCL 2.4) runs two trees, each on half of the
// buffer, built so that every interior rank of one tree is a leaf of the other.
// Construction here: positions 1..n form an in-order tree whose root over a range of
// positions is the one with the most trailing zero bits; odd positions are exactly the
// leaves. Tree one puts rank r at position r + 1 (odd ranks interior). Tree two mirrors
// the ranks (position n - r) for even n and shifts them by one (position r, rank 0 at
// position n) for odd n, so its interior ranks are even: leaves of tree one.
// Pure and std only.
#pragma once

#include <vector>

#include "common/status.h"

namespace chorus::topologies {

struct TreeLinks {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // ascending; at most two but in the flat tree
};

struct Tree {
  int root = 0;
  std::vector<TreeLinks> nodes;  // indexed by rank
  bool IsLeaf(int rank) const { return nodes[rank].children.empty(); }
};

// Heap-ordered binary tree: root 0, parent (r - 1) / 2, children 2r + 1 and 2r + 2.
Result<Tree> MakeBinaryTree(int n);

// Flat tree: root 0, every other rank its child (2 hops for a reduce and
// broadcast, the root handling n - 1 messages each way). The binary tree from
// 3 ranks down.
Result<Tree> MakeFlatTree(int n);

struct DoubleBinaryTree {
  Tree first;   // reduces and broadcasts the first half of the buffer
  Tree second;  // the second half
};

// Two in-order binary trees of depth about log2(n) as described above. Needs n >= 1.
Result<DoubleBinaryTree> MakeDoubleBinaryTree(int n);

}  // namespace chorus::topologies
