// Small statistics shared by eval and load.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace kvtool {

// Nearest-rank q-quantile (0 < q <= 1) of v; 0 for an empty v.
inline double nearest_rank(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(idx == 0 ? 0 : idx - 1, v.size() - 1)];
}

}  // namespace kvtool
