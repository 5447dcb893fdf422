// Link groups: ranks grouped by measured link costs, for finding sites.
//
// `cost` holds, for each pair of ranks, what moving a probe between them
// took (seconds; a round trip plus a transfer). Links inside a site are far
// cheaper than links between sites, but on a loaded host the costs inside a
// site spread over a decade, so no single step between consecutive costs
// need stand out. The pair costs are split in two, in log scale, where the
// two classes are farthest apart for their sizes (Otsu's threshold: the
// split of most variance between the classes). When the geometric means of
// the classes are at least `min_gap` apart, the pairs below the split are
// "near", and the groups are the connected components of near pairs (a
// pair inside a site measured slow by chance does not split its site). The
// groups hold when the median pair across them costs at least `min_gap`
// times the median pair inside them (a noisy single site that the split
// cut has pairs alike on both sides). Otherwise every rank is in one group. With sites at several distances
// the split falls at the widest separation: the top level of a hierarchy.
// Pure and std only.
#pragma once

#include <vector>

#include "common/status.h"

namespace chorus::topologies {

struct LinkGroups {
  std::vector<int> group_of_rank;  // [rank] -> group, numbered by their lowest rank
  int groups = 1;
  // Across groups: the median pair across them over the median inside;
  // one group: the far and near classes' geometric means (1 with fewer
  // than 2 pairs).
  double gap = 1.0;
  double step = 1.0;       // the ratio of the cheapest far cost to the dearest near one
  double threshold = 0.0;  // near below it (the geometric mean across the step); 0 with one group
};

// `cost[i * n + j]` for i != j (the diagonal is ignored; cost[i][j] and
// cost[j][i] may differ: their mean is the pair's). Errors: a size that is
// not n * n, n < 1, min_gap <= 1, or a pair cost that is not positive and
// finite (naming the pair).
Result<LinkGroups> GroupByLinkCost(const std::vector<double>& cost, int n, double min_gap);


}  // namespace chorus::topologies
