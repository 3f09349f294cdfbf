// The MagicPIG sampling estimator of `kvtool eval` (lib/offline/impl/eval_parts.h).
#include <algorithm>
#include <cmath>

#include "impl/eval_parts.h"

namespace kvtool::eval {

void SoftmaxState::add(double logit, const float* v) {
  if (logit > max) {
    double scale = std::exp(max - logit);
    sum *= scale;
    for (auto& a : acc) a *= scale;
    max = logit;
  }
  double e = std::exp(logit - max);
  sum += e;
  for (size_t j = 0; j < acc.size(); ++j) acc[j] += e * v[j];
}

void SoftmaxState::merge(const SoftmaxState& o) {
  if (o.sum == 0) return;
  if (sum == 0) {
    *this = o;
    return;
  }
  double m = std::max(max, o.max), a = std::exp(max - m), b = std::exp(o.max - m);
  for (size_t j = 0; j < acc.size(); ++j) acc[j] = acc[j] * a + o.acc[j] * b;
  sum = sum * a + o.sum * b;
  max = m;
}

std::vector<double> SoftmaxState::output() const {
  std::vector<double> o(acc.size(), 0.0);
  if (sum > 0)
    for (size_t j = 0; j < acc.size(); ++j) o[j] = acc[j] / sum;
  return o;
}

double sampled_output_error(const DenseReference& ref, const std::vector<uint64_t>& kept, const CandidateReceipt& rc,
                            const float* V, int64_t E, int64_t d) {
  SoftmaxState exact(static_cast<size_t>(d)), sampled(static_cast<size_t>(d));
  std::vector<char> is_sampled(static_cast<size_t>(E), 0);
  for (size_t ci = 0; ci < rc.candidates.size(); ++ci) {
    int64_t id = rc.candidates[ci];
    if (id < 0 || id >= E || rc.inclusion[ci] <= 0) continue;
    is_sampled[id] = 1;
    double z = std::log(ref.p[id]) + ref.log_normalizer - std::log(rc.inclusion[ci]);
    sampled.add(z, V + id * d);
  }
  for (int64_t i = 0; i < E; ++i)
    if (row_bit(kept, i) && !is_sampled[i]) exact.add(std::log(ref.p[i]) + ref.log_normalizer, V + i * d);
  exact.merge(sampled);
  auto oe = exact.output();
  double en = 0;
  for (int64_t t = 0; t < d; ++t) en += (oe[t] - ref.o[t]) * (oe[t] - ref.o[t]);
  return std::sqrt(en);
}

}  // namespace kvtool::eval
