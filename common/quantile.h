// Order statistics of timing samples, for the benchmarks' medians and tails.
// Std only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace chorus {

// The q-quantile of `v` by nearest rank: the element at index
// min(size - 1, floor(q * size)) of the sorted samples (0 <= q <= 1; q = 0.5 is
// the upper median of an even count). Reorders `v` (nth_element, linear time);
// 0 when `v` is empty.
inline double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace chorus
