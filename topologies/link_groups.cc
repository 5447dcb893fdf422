// Link groups. See link_groups.h.
#include "topologies/link_groups.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace chorus::topologies {

namespace {

int Root(std::vector<int>& parent, int i) {
  while (parent[static_cast<size_t>(i)] != i) {
    parent[static_cast<size_t>(i)] = parent[static_cast<size_t>(parent[static_cast<size_t>(i)])];
    i = parent[static_cast<size_t>(i)];
  }
  return i;
}

}  // namespace

Result<LinkGroups> GroupByLinkCost(const std::vector<double>& cost, int n, double min_gap) {
  if (n < 1 || cost.size() != static_cast<size_t>(n) * static_cast<size_t>(n)) {
    return Err(InvalidArgument("link groups: " + std::to_string(cost.size()) + " costs for " + std::to_string(n) +
                               " ranks (expected n * n)"));
  }
  if (!(min_gap > 1.0)) return Err(InvalidArgument("link groups: the gap must be > 1"));
  std::vector<double> pair(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0);
  std::vector<double> sorted;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const double c = 0.5 * (cost[static_cast<size_t>(i * n + j)] + cost[static_cast<size_t>(j * n + i)]);
      if (!(c > 0.0) || !std::isfinite(c)) {
        return Err(InvalidArgument("link groups: ranks " + std::to_string(i) + " and " + std::to_string(j) +
                                   " have cost " + std::to_string(c)));
      }
      pair[static_cast<size_t>(i * n + j)] = c;
      sorted.push_back(c);
    }
  }
  std::sort(sorted.begin(), sorted.end());
  LinkGroups groups;
  groups.group_of_rank.assign(static_cast<size_t>(n), 0);
  if (sorted.size() < 2) return groups;
  // Otsu in log scale: the split k (near: [0, k], far: (k, m)) of most
  // variance between the classes, w_near w_far (mean_far - mean_near)^2.
  const size_t m = sorted.size();
  std::vector<double> prefix(m + 1, 0.0);
  for (size_t k = 0; k < m; ++k) prefix[k + 1] = prefix[k] + std::log(sorted[k]);
  double best = -1.0;
  size_t split = 0;
  for (size_t k = 0; k + 1 < m; ++k) {
    const double near = static_cast<double>(k + 1), far = static_cast<double>(m - k - 1);
    const double mean_near = prefix[k + 1] / near, mean_far = (prefix[m] - prefix[k + 1]) / far;
    const double between = near * far * (mean_far - mean_near) * (mean_far - mean_near);
    if (between > best) {
      best = between;
      split = k;
      groups.gap = std::exp(mean_far - mean_near);
    }
  }
  groups.step = sorted[split + 1] / sorted[split];
  if (groups.gap < min_gap) {
    groups.gap = std::max(1.0, groups.gap);
    return groups;
  }
  groups.threshold = std::sqrt(sorted[split] * sorted[split + 1]);
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (pair[static_cast<size_t>(i * n + j)] < groups.threshold) {
        const int a = Root(parent, i), b = Root(parent, j);
        parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);  // the root is the lowest rank
      }
    }
  }
  std::vector<int> id_of_root(static_cast<size_t>(n), -1);
  groups.groups = 0;
  for (int i = 0; i < n; ++i) {
    int& id = id_of_root[static_cast<size_t>(Root(parent, i))];
    if (id < 0) id = groups.groups++;
    groups.group_of_rank[static_cast<size_t>(i)] = id;
  }
  if (groups.groups < 2) return groups;
  // The groups hold when the pairs across them cost min_gap times the pairs
  // inside them, by their medians: a noisy site that the split cut would
  // have pairs alike on both sides.
  std::vector<double> inside, across;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const bool same = groups.group_of_rank[static_cast<size_t>(i)] == groups.group_of_rank[static_cast<size_t>(j)];
      (same ? inside : across).push_back(pair[static_cast<size_t>(i * n + j)]);
    }
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  // Single-member groups have no pair inside: the near class stands for them.
  const double near = inside.empty() ? std::exp(prefix[split + 1] / static_cast<double>(split + 1)) : median(inside);
  groups.gap = median(across) / near;
  if (groups.gap < min_gap) {
    LinkGroups one;
    one.group_of_rank.assign(static_cast<size_t>(n), 0);
    one.gap = groups.gap;
    one.step = groups.step;
    return one;
  }
  return groups;
}

}  // namespace chorus::topologies
