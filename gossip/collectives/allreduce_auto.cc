// ChooseAllreduceAlgorithm (see allreduce_auto.h).
#include "gossip/collectives/allreduce_auto.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace chorus::gossip {

int TreeAllreduceMessages(int world_size) { return 2 * (world_size - 1); }

int RecursiveDoublingMessages(int world_size) {
  int p2 = 1, rounds = 0;
  while (p2 * 2 <= world_size) {
    p2 *= 2;
    ++rounds;
  }
  return p2 * rounds + 2 * (world_size - p2);
}

bool Oversubscribed(int world_size, int num_hosts, int host_cores) {
  return num_hosts == 1 && host_cores > 0 && world_size > host_cores;
}

namespace {

// Where rule 2 can pick the tree at all (whatever the size).
bool SmallTreeRuleApplies(int world_size, int num_hosts, int host_cores) {
  return Oversubscribed(world_size, num_hosts, host_cores) &&
         TreeAllreduceMessages(world_size) < RecursiveDoublingMessages(world_size);
}

}  // namespace

AllreduceAlgorithm ChooseAllreduceAlgorithm(size_t bytes, int world_size, int num_hosts,
                                            const AllreduceCrossovers& crossovers, bool host_memory,
                                            int host_cores) {
  if (host_memory && num_hosts == 1 && world_size > 1) return AllreduceAlgorithm::kSharedMemory;
  if (num_hosts > 1 && num_hosts < world_size && bytes >= crossovers.hierarchical_min_bytes) {
    return AllreduceAlgorithm::kHierarchical;
  }
  if (bytes <= crossovers.small_tree_max_bytes && SmallTreeRuleApplies(world_size, num_hosts, host_cores)) {
    return AllreduceAlgorithm::kTree;
  }
  if (bytes <= crossovers.recursive_doubling_max_bytes) {
    return AllreduceAlgorithm::kRecursiveDoubling;
  }
  if (bytes <= crossovers.tree_max_bytes) return AllreduceAlgorithm::kTree;
  if (bytes >= crossovers.halving_doubling_min_bytes && bytes <= crossovers.halving_doubling_max_bytes) {
    return AllreduceAlgorithm::kHalvingDoubling;
  }
  if (bytes >= crossovers.large_tree_min_bytes) return AllreduceAlgorithm::kTree;
  return AllreduceAlgorithm::kRing;
}

namespace {

// The measured times of one (bytes, world size), by algorithm.
struct Cell {
  size_t bytes = 0;
  int world_size = 0;
  std::map<AllreduceAlgorithm, double> time_us;
  double best_us = 0;
};

constexpr AllreduceAlgorithm kRuleChoices[] = {AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kTree,
                                                AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRing};

// What `c` picks for a measured cell: its ranks on one host of `host_cores`, no shared memory.
AllreduceAlgorithm PickFor(const Cell& cell, const AllreduceCrossovers& c, int host_cores) {
  return ChooseAllreduceAlgorithm(cell.bytes, cell.world_size, 1, c, /*host_memory=*/false, host_cores);
}

// Mean log slowdown of what `c` picks over the fastest, per cell.
double MeanLogSlowdown(const std::vector<Cell>& cells, const AllreduceCrossovers& c, int host_cores) {
  double sum = 0;
  for (const Cell& cell : cells) {
    sum += std::log(cell.time_us.at(PickFor(cell, c, host_cores)) / cell.best_us);
  }
  return sum / static_cast<double>(cells.size());
}

// The measured cells that have a time for every rule's choice, with their best
// time. Errors: a time that is not positive and finite; no such cell.
Result<std::vector<Cell>> MeasuredCells(std::span<const AllreduceTiming> timings) {
  std::map<std::pair<size_t, int>, Cell> by_key;
  for (const AllreduceTiming& t : timings) {
    if (!(t.time_us > 0) || !std::isfinite(t.time_us)) {
      return Err(InvalidArgument("crossover fit: " + std::string(AllreduceAlgorithmName(t.algorithm)) + " at " +
                                 std::to_string(t.bytes) + " B over " + std::to_string(t.world_size) +
                                 " ranks has time " + std::to_string(t.time_us) + " us"));
    }
    Cell& cell = by_key[{t.bytes, t.world_size}];
    cell.bytes = t.bytes;
    cell.world_size = t.world_size;
    cell.time_us[t.algorithm] = t.time_us;
  }
  std::vector<Cell> cells;
  for (auto& entry : by_key) {
    Cell& cell = entry.second;  // a named reference: lambdas capture it (not a structured binding) on clang 14
    if (!std::all_of(std::begin(kRuleChoices), std::end(kRuleChoices),
                     [&](AllreduceAlgorithm a) { return cell.time_us.count(a) > 0; })) {
      continue;
    }
    cell.best_us = std::numeric_limits<double>::infinity();
    for (AllreduceAlgorithm a : kRuleChoices) cell.best_us = std::min(cell.best_us, cell.time_us[a]);
    cells.push_back(cell);
  }
  if (cells.empty()) {
    return Err(InvalidArgument(
        "crossover fit: no size has times for all of recursive-doubling, tree, halving-doubling and ring"));
  }
  return cells;
}

// The thresholds worth trying. Inclusive upper bounds: never (0) or a measured
// size; lower bounds: a measured size or never (SIZE_MAX). Thresholds between
// two measured sizes pick the same everywhere measured, so these are all the
// distinct fits.
struct Candidates {
  std::vector<size_t> maxima;
  std::vector<size_t> minima;
};

Candidates CandidateThresholds(const std::vector<Cell>& cells) {
  std::vector<size_t> sizes;
  for (const Cell& cell : cells) sizes.push_back(cell.bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  Candidates candidates;
  candidates.maxima = {0};
  candidates.maxima.insert(candidates.maxima.end(), sizes.begin(), sizes.end());
  candidates.minima = sizes;
  candidates.minima.push_back(SIZE_MAX);
  return candidates;
}

// Sets fit.crossovers to the candidate thresholds with the least mean log
// slowdown, and fit.slowdown and fit.base_slowdown.
void SearchCrossovers(const std::vector<Cell>& cells, const Candidates& candidates, const AllreduceCrossovers& base,
                      int host_cores, CrossoverFit& fit) {
  const std::vector<size_t>& maxima = candidates.maxima;
  const std::vector<size_t>& minima = candidates.minima;
  fit.crossovers = base;
  double best = MeanLogSlowdown(cells, base, host_cores);
  fit.base_slowdown = std::exp(best);
  AllreduceCrossovers c = base;
  // The small-tree rule can pick only where some measured world size exceeds
  // the cores (and has 4 ranks or more); elsewhere keep base's threshold.
  const bool small_tree_applies = std::any_of(cells.begin(), cells.end(), [&](const Cell& cell) {
    return SmallTreeRuleApplies(cell.world_size, 1, host_cores);
  });
  const std::vector<size_t> small_tree_maxima = small_tree_applies ? maxima : std::vector<size_t>{base.small_tree_max_bytes};
  for (size_t small_tree_max : small_tree_maxima) {
    c.small_tree_max_bytes = small_tree_max;
    for (size_t rd_max : maxima) {
      c.recursive_doubling_max_bytes = rd_max;
      for (size_t tree_max : maxima) {
        if (tree_max != 0 && tree_max <= rd_max) continue;  // the tree would never be picked: same as 0
        c.tree_max_bytes = tree_max;
        for (size_t hd_min : minima) {
          for (size_t hd_max : maxima) {
            if (hd_min == SIZE_MAX ? hd_max != 0 : hd_max < hd_min) continue;
            c.halving_doubling_min_bytes = hd_min;
            c.halving_doubling_max_bytes = hd_max;
            for (size_t tree_min : minima) {
              c.large_tree_min_bytes = tree_min;
              // Strictly better only (by more than rounding), so that ties keep
              // `base` and then the first (smallest) thresholds found.
              const double cost = MeanLogSlowdown(cells, c, host_cores);
              if (cost < best - 1e-12) {
                best = cost;
                fit.crossovers = c;
              }
            }
          }
        }
      }
    }
  }
  fit.slowdown = std::exp(best);
}

// Lower bounds that an earlier rule shadows start where it ends instead (a
// table that reads in order), unless that changes a pick: with the rules
// before it off, the large-tree rule from 4 KiB is not shadowed below
// halving-doubling's range.
AllreduceCrossovers InRuleOrder(const std::vector<Cell>& cells, const AllreduceCrossovers& fitted, int host_cores) {
  AllreduceCrossovers f = fitted;
  auto after = [](size_t end) { return end == SIZE_MAX ? end : end + 1; };
  const size_t small_end = std::max(f.recursive_doubling_max_bytes, f.tree_max_bytes);
  if (f.halving_doubling_min_bytes <= small_end) f.halving_doubling_min_bytes = after(small_end);
  if (f.halving_doubling_min_bytes > f.halving_doubling_max_bytes) {
    f.halving_doubling_min_bytes = SIZE_MAX;
    f.halving_doubling_max_bytes = 0;
  }
  const size_t hd_end = std::max(small_end, f.halving_doubling_max_bytes);
  if (f.large_tree_min_bytes <= hd_end) f.large_tree_min_bytes = after(hd_end);
  const bool same_picks = std::all_of(cells.begin(), cells.end(), [&](const Cell& cell) {
    return PickFor(cell, f, host_cores) == PickFor(cell, fitted, host_cores);
  });
  return same_picks ? f : fitted;
}

}  // namespace

Result<CrossoverFit> FitAllreduceCrossovers(std::span<const AllreduceTiming> timings,
                                            const AllreduceCrossovers& base, int host_cores) {
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Cell> cells, MeasuredCells(timings));
  const Candidates candidates = CandidateThresholds(cells);
  CrossoverFit fit;
  SearchCrossovers(cells, candidates, base, host_cores, fit);
  fit.crossovers = InRuleOrder(cells, fit.crossovers, host_cores);
  return fit;
}

}  // namespace chorus::gossip
