// Link groups: ranks grouped by measured link costs, for finding sites.
//
// `cost` holds, for each pair of ranks, what moving a probe between them
// took (seconds; a round trip plus a transfer). Links inside a site are far
// cheaper than links between sites, so the pair costs, sorted, show one
// large step between the two kinds: the largest ratio between consecutive
// costs. When it is at least `min_gap` the pairs below it are "near" and
// the groups are the connected components of near pairs; otherwise every
// rank is in one group. With sites at several distances (a third site far
// from two near ones) the largest step is the one taken: the grouping is
// the top level of a hierarchy. Pure and std only.
#pragma once

#include <vector>

#include "common/status.h"

namespace chorus::topologies {

struct LinkGroups {
  std::vector<int> group_of_rank;  // [rank] -> group, numbered by their lowest rank
  int groups = 1;
  double gap = 1.0;        // the largest ratio between consecutive pair costs (1 with fewer than 2 pairs)
  double threshold = 0.0;  // near below it (the geometric mean across the gap); 0 with one group
};

// `cost[i * n + j]` for i != j (the diagonal is ignored; cost[i][j] and
// cost[j][i] may differ: their mean is the pair's). Errors: a size that is
// not n * n, n < 1, min_gap <= 1, or a pair cost that is not positive and
// finite (naming the pair).
Result<LinkGroups> GroupByLinkCost(const std::vector<double>& cost, int n, double min_gap);

}  // namespace chorus::topologies
