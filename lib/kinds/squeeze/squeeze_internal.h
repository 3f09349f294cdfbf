// Internals of kind "squeeze" shared by its runtime (squeeze_select.cpp) and offline
// (squeeze_build.cpp) halves: the per-key cluster score both calibration and queries use.
// Section layout: formats/kinds-v1.md, "squeeze".
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/json.h"
#include "kvtool/scoring.h"

namespace kvtool::squeeze {

inline std::string quantile_key(double q) { return json(q).dump(); }

// exp(z_j - m) / sum_k N_k exp(z_k - m) in place over z: the per-key score of every cluster.
inline void normalize_scores(const std::vector<uint32_t>& sizes, std::vector<double>& out) {
  const int64_t C = static_cast<int64_t>(sizes.size());
  double mx = -INFINITY;
  for (int64_t c = 0; c < C; ++c) mx = std::max(mx, out[c]);
  double den = 0;
  for (int64_t c = 0; c < C; ++c) den += sizes[c] * std::exp(out[c] - mx);
  for (int64_t c = 0; c < C; ++c) out[c] = std::exp(out[c] - mx) / den;
}

inline void cluster_scores(const float* q, const std::vector<float>& cent, const std::vector<uint32_t>& sizes,
                           int64_t d, std::vector<double>& out) {
  out.assign(sizes.size(), 0.0);
  scoring::dot_scores_f64(q, cent.data(), nullptr, static_cast<int64_t>(sizes.size()), d,
                          1.0 / std::sqrt(static_cast<double>(d)), out.data());
  normalize_scores(sizes, out);
}

}  // namespace kvtool::squeeze
