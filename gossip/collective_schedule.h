// Collective schedules: pure functions saying which rank sends which part of a
// buffer to whom, for the all-reduce algorithms in this folder.
//
// Ranks here are indices 0..n-1 of a CollectiveGroup, not transport ranks.
// TEMPORARY HOME: these belong in topologies/ (collective schedules); they live
// here until topologies/ has them, then the lead folds the duplicates.
//
// Must not: touch a transport, allocate per element, log, or keep state.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::gossip {

// A contiguous range of elements [begin, begin + count).
struct ElemRange {
  size_t begin = 0;
  size_t count = 0;
  size_t end() const { return begin + count; }
};

// Splits `count` elements into `parts` (>= 1) contiguous ranges in order; sizes
// differ by at most one, the larger ones first.
std::vector<ElemRange> BalancedPartition(size_t count, int parts);
// Number of segments of at most `segment` (>= 1) elements covering `count`.
size_t NumSegments(size_t count, size_t segment);
// Segment k of `range` cut into segments of `segment` elements.
ElemRange SegmentOf(ElemRange range, size_t segment, size_t k);

// Ring all-reduce over n ranks, steps 0 .. 2(n-1)-1: steps 0 .. n-2 are the
// reduce-scatter, steps n-1 .. 2n-3 the all-gather. At step s rank r sends chunk
// RingChunkSent(r, n, s) to r+1 and receives chunk RingChunkReceived(r, n, s) from
// r-1 (reducing it into its own during the reduce-scatter). After the
// reduce-scatter rank r holds the full sum of chunk r+1. The chunk received at s
// is the one sent at s+1.
int RingChunkSent(int rank, int n, int step);
int RingChunkReceived(int rank, int n, int step);

// A rooted tree over ranks 0..n-1. height: 0 for a leaf, 1 + the largest child
// height otherwise.
struct TreeNode {
  int parent = -1;  // -1 at the root
  std::vector<int> children;
  int height = 0;
};
struct Tree {
  int root = 0;
  std::vector<TreeNode> nodes;  // by rank
  int height() const { return nodes.empty() ? 0 : nodes[root].height; }
};

// Binary tree rooted at 0, built from the ranks' bits (the in-order tree NCCL
// uses): rank r > 0 with lowest set bit b hangs under (r ^ b) | 2b, or under r ^ b
// when that is past the end. Odd ranks are leaves; depth about log2 n.
Tree MakeBinaryTree(int n);
// The second tree of a double binary tree: the first one mirrored (r -> n-1-r)
// when n is even, rotated by one when n is odd, so that most ranks that are
// leaves in one tree are inner nodes in the other.
Tree MakeDualBinaryTree(int n);
// MakeBinaryTree relabelled (r -> (r + root) mod n) so that `root` is the root.
Tree MakeRootedBinaryTree(int n, int root);

// Recursive halving-doubling over n ranks. The largest power of two p <= n takes
// part in the halving and doubling rounds; the extra = n - p ranks 0, 2, ..,
// 2*extra-2 first fold their whole buffer into their right neighbour, sit out, and
// get the result back at the end. Ranks taking part are renumbered 0..p-1.
struct HalvingDoublingPlan {
  int n = 1;
  int power = 1;
  int extra = 0;

  static HalvingDoublingPlan Make(int n);
  // Rank in 0..p-1, or -1 for a rank that folds out.
  int NewRank(int rank) const;
  int OldRank(int new_rank) const;
  // The rank folded with `rank`, or -1 when `rank` is not part of a fold.
  int FoldPartner(int rank) const;
  int Rounds() const;  // log2(power)
};

// Ranks grouped by host: groups[g] lists the ranks with one host key, ascending;
// groups are ordered by their first rank (the leader).
struct HostGroups {
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of;  // by rank

  // Fails (InvalidArgument naming the rank) on an empty key.
  static Result<HostGroups> Make(std::span<const std::string> host_keys);
  std::vector<int> Leaders() const;
  int num_hosts() const { return static_cast<int>(groups.size()); }
  // True when some host holds more than one rank.
  bool AnyShared() const { return groups.size() < group_of.size(); }
};

}  // namespace chorus::gossip
