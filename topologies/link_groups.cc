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

namespace {

// Otsu in log scale over ascending `sorted` (two or more): the split k
// (near: [0, k], far: (k, m)) of most variance between the classes,
// w_near w_far (mean_far - mean_near)^2, with the ratio of the classes'
// geometric means and the near class's.
struct Split {
  size_t k = 0;
  double gap = 1.0;
  double near_mean = 0.0;
};
Split OtsuSplit(const std::vector<double>& sorted) {
  const size_t m = sorted.size();
  std::vector<double> prefix(m + 1, 0.0);
  for (size_t k = 0; k < m; ++k) prefix[k + 1] = prefix[k] + std::log(sorted[k]);
  double best = -1.0;
  Split split;
  for (size_t k = 0; k + 1 < m; ++k) {
    const double near = static_cast<double>(k + 1), far = static_cast<double>(m - k - 1);
    const double mean_near = prefix[k + 1] / near, mean_far = (prefix[m] - prefix[k + 1]) / far;
    const double between = near * far * (mean_far - mean_near) * (mean_far - mean_near);
    if (between > best) {
      best = between;
      split = {k, std::exp(mean_far - mean_near), std::exp(mean_near)};
    }
  }
  return split;
}

// The connected components of the pairs cheaper than `threshold`, numbered
// by their lowest rank, into `groups`.
void ComponentsBelow(const std::vector<double>& pair, int n, double threshold, LinkGroups* groups) {
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (pair[static_cast<size_t>(i * n + j)] < threshold) {
        const int a = Root(parent, i), b = Root(parent, j);
        parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);  // the root is the lowest rank
      }
    }
  }
  std::vector<int> id_of_root(static_cast<size_t>(n), -1);
  groups->groups = 0;
  for (int i = 0; i < n; ++i) {
    int& id = id_of_root[static_cast<size_t>(Root(parent, i))];
    if (id < 0) id = groups->groups++;
    groups->group_of_rank[static_cast<size_t>(i)] = id;
  }
}

// The median pair across the groups over the median pair inside them
// (`near_mean` where no group has two members).
double MedianGap(const std::vector<double>& pair, int n, const LinkGroups& groups, double near_mean) {
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
  return median(across) / (inside.empty() ? near_mean : median(inside));
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
  const Split split = OtsuSplit(sorted);
  groups.gap = std::max(1.0, split.gap);
  groups.step = sorted[split.k + 1] / sorted[split.k];
  if (split.gap < min_gap) return groups;
  groups.threshold = std::sqrt(sorted[split.k] * sorted[split.k + 1]);
  ComponentsBelow(pair, n, groups.threshold, &groups);
  if (groups.groups < 2) return groups;
  // The groups hold when the pairs across them cost min_gap times the pairs
  // inside them, by their medians: a noisy site that the split cut would
  // have pairs alike on both sides.
  groups.gap = MedianGap(pair, n, groups, split.near_mean);
  if (groups.gap >= min_gap) return groups;
  LinkGroups one;
  one.group_of_rank.assign(static_cast<size_t>(n), 0);
  one.gap = groups.gap;
  one.step = groups.step;
  return one;
}

}  // namespace chorus::topologies
