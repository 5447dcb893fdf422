// Collective schedules (see collective_schedule.h). Pure functions.
#include "gossip/collective_schedule.h"

#include <algorithm>
#include <map>

namespace chorus::gossip {

std::vector<ElemRange> BalancedPartition(size_t count, int parts) {
  parts = std::max(parts, 1);
  std::vector<ElemRange> out(parts);
  const size_t base = count / parts;
  const size_t larger = count % parts;  // the first `larger` ranges get one more
  size_t begin = 0;
  for (int p = 0; p < parts; ++p) {
    const size_t size = base + (static_cast<size_t>(p) < larger ? 1 : 0);
    out[p] = ElemRange{begin, size};
    begin += size;
  }
  return out;
}

size_t NumSegments(size_t count, size_t segment) {
  segment = std::max<size_t>(segment, 1);
  return (count + segment - 1) / segment;
}

ElemRange SegmentOf(ElemRange range, size_t segment, size_t k) {
  segment = std::max<size_t>(segment, 1);
  const size_t begin = std::min(range.count, k * segment);
  const size_t count = std::min(segment, range.count - begin);
  return ElemRange{range.begin + begin, count};
}

namespace {
int Mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

int RingChunkSent(int rank, int n, int step) {
  if (step < n - 1) return Mod(rank - step, n);
  return Mod(rank + 1 - (step - (n - 1)), n);
}

int RingChunkReceived(int rank, int n, int step) {
  if (step < n - 1) return Mod(rank - step - 1, n);
  return Mod(rank - (step - (n - 1)), n);
}

namespace {

// Parent of rank r > 0 in the bit tree over n ranks (see MakeBinaryTree).
int BitTreeParent(int r, int n) {
  const int bit = r & -r;
  const int up = (r ^ bit) | (bit << 1);
  return up < n ? up : (r ^ bit);
}

// Fills children and heights from parents.
Tree FromParents(int root, std::vector<int> parents) {
  Tree tree;
  tree.root = root;
  const int n = static_cast<int>(parents.size());
  tree.nodes.resize(n);
  for (int r = 0; r < n; ++r) {
    tree.nodes[r].parent = parents[r];
    if (parents[r] >= 0) tree.nodes[parents[r]].children.push_back(r);
  }
  for (auto& node : tree.nodes) std::sort(node.children.begin(), node.children.end());
  // Heights: a node's height is final once all its children's are; iterate to a
  // fixed point (depth is O(log n) for these trees, so this is cheap).
  bool changed = true;
  while (changed) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      int h = 0;
      for (int c : tree.nodes[r].children) h = std::max(h, tree.nodes[c].height + 1);
      if (h != tree.nodes[r].height) {
        tree.nodes[r].height = h;
        changed = true;
      }
    }
  }
  return tree;
}

// Relabels a tree over labels into one over ranks: rank = map(label).
template <typename Map>
Tree Relabel(const Tree& labels, Map map) {
  const int n = static_cast<int>(labels.nodes.size());
  std::vector<int> parents(n, -1);
  for (int label = 0; label < n; ++label) {
    const int p = labels.nodes[label].parent;
    parents[map(label)] = p < 0 ? -1 : map(p);
  }
  return FromParents(map(labels.root), std::move(parents));
}

}  // namespace

Tree MakeBinaryTree(int n) {
  n = std::max(n, 1);
  std::vector<int> parents(n, -1);
  for (int r = 1; r < n; ++r) parents[r] = BitTreeParent(r, n);
  return FromParents(0, std::move(parents));
}

Tree MakeDualBinaryTree(int n) {
  n = std::max(n, 1);
  if (n % 2 == 1) return MakeRootedBinaryTree(n, n - 1);
  return Relabel(MakeBinaryTree(n), [n](int label) { return n - 1 - label; });
}

Tree MakeRootedBinaryTree(int n, int root) {
  n = std::max(n, 1);
  return Relabel(MakeBinaryTree(n), [n, root](int label) { return Mod(label + root, n); });
}

HalvingDoublingPlan HalvingDoublingPlan::Make(int n) {
  HalvingDoublingPlan plan;
  plan.n = std::max(n, 1);
  while (plan.power * 2 <= plan.n) plan.power *= 2;
  plan.extra = plan.n - plan.power;
  return plan;
}

int HalvingDoublingPlan::NewRank(int rank) const {
  if (rank < 2 * extra) return rank % 2 == 1 ? rank / 2 : -1;
  return rank - extra;
}

int HalvingDoublingPlan::OldRank(int new_rank) const {
  return new_rank < extra ? 2 * new_rank + 1 : new_rank + extra;
}

int HalvingDoublingPlan::FoldPartner(int rank) const {
  if (rank >= 2 * extra) return -1;
  return rank % 2 == 0 ? rank + 1 : rank - 1;
}

int HalvingDoublingPlan::Rounds() const {
  int rounds = 0;
  for (int p = power; p > 1; p /= 2) ++rounds;
  return rounds;
}

Result<HostGroups> HostGroups::Make(std::span<const std::string> host_keys) {
  HostGroups out;
  out.group_of.resize(host_keys.size());
  std::map<std::string, int> index;
  for (size_t r = 0; r < host_keys.size(); ++r) {
    if (host_keys[r].empty()) {
      return Err(InvalidArgument("host groups: rank " + std::to_string(r) + " has an empty host key"));
    }
    auto [it, added] = index.emplace(host_keys[r], static_cast<int>(out.groups.size()));
    if (added) out.groups.emplace_back();
    out.groups[it->second].push_back(static_cast<int>(r));
    out.group_of[r] = it->second;
  }
  return out;
}

std::vector<int> HostGroups::Leaders() const {
  std::vector<int> leaders;
  leaders.reserve(groups.size());
  for (const auto& g : groups) leaders.push_back(g.front());
  return leaders;
}

}  // namespace chorus::gossip
