// The dense reference and the metrics of `kvtool eval` (lib/offline/impl/eval_parts.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "impl/eval_parts.h"

namespace kvtool::eval {

void DenseReference::compute(const float* q, const float* K, const float* V, int64_t E, int64_t d) {
  p.assign(static_cast<size_t>(E), 0.0);
  double mx = -INFINITY;
  for (int64_t i = 0; i < E; ++i) {
    double z = 0;
    for (int64_t t = 0; t < d; ++t) z += static_cast<double>(q[t]) * K[i * d + t];
    p[i] = z / std::sqrt(static_cast<double>(d));
    mx = std::max(mx, p[i]);
  }
  double sum = 0;
  for (auto& x : p) sum += (x = std::exp(x - mx));
  for (auto& x : p) x /= sum;
  // log p_i + log-sum-exp restores the logit z_i = q·k_i/sqrt(d) up to a shared constant.
  log_normalizer = mx + std::log(sum);
  o.assign(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < E; ++i)
    for (int64_t t = 0; t < d; ++t) o[t] += p[i] * V[i * d + t];
  order.resize(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
}

void ReceiptMetrics::measure(const DenseReference& ref, const CandidateReceipt& rc, const float* V, int64_t E,
                             int64_t d) {
  kept.assign(static_cast<size_t>(E), 0);
  for (int64_t id : rc.candidates)
    if (id < E) kept[id] = 1;
  for (int64_t id : rc.always_included)
    if (id < E) kept[id] = 1;
  rows = 0;
  retained = 0;
  std::vector<double> kept_out(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < E; ++i)
    if (kept[i]) {
      ++rows;
      retained += ref.p[i];
      for (int64_t t = 0; t < d; ++t) kept_out[t] += ref.p[i] * V[i * d + t];
    }
  oracle = 0;
  double hit = 0;
  for (int64_t i = 0; i < rows; ++i) {
    oracle += ref.p[ref.order[i]];
    hit += kept[ref.order[i]];
  }
  double err = 0, on = 0;
  for (int64_t t = 0; t < d; ++t) {
    double diff = (retained > 0 ? kept_out[t] / retained : 0) - ref.o[t];
    err += diff * diff;
    on += ref.o[t] * ref.o[t];
  }
  error = std::sqrt(err);
  output_norm = std::sqrt(on);
  relative_error = on > 0 ? error / output_norm : 0;
  fraction = static_cast<double>(rows) / static_cast<double>(E);
  recall = rows > 0 ? hit / static_cast<double>(rows) : 1;
}

}  // namespace kvtool::eval
