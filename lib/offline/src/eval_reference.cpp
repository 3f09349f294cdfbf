// The dense reference and the metrics of `kvtool eval` (lib/offline/impl/eval_parts.h).
#include <algorithm>
#include <functional>
#include <cmath>
#include <numeric>

#include "impl/eval_parts.h"

// Fortran BLAS (OpenBLAS through FAISS's link), column-major.
extern "C" int dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                      const double* beta, double* c, const int* ldc);

namespace kvtool::eval {

void DenseSupport::load(const float* k, const float* v, int64_t rows, int64_t dim) {
  E = rows;
  d = dim;
  K.assign(k, k + rows * dim);
  V.assign(v, v + rows * dim);
}

int64_t DenseBlock::block_rows(int64_t E) {
  return std::clamp<int64_t>((int64_t{1} << 23) / std::max<int64_t>(E, 1), 1, 256);
}

// Row-major Z[count, E] = Q[count, d] · K^T is column-major Z^T = K^T' · Q^T: dgemm("T", "N") over
// the row-major K (column-major [d, E]); O[count, d] = P · V is column-major O^T = V^T · P^T.
void DenseBlock::compute(const double* Q, int64_t count, const DenseSupport& s) {
  n = count;
  E = s.E;
  d = s.d;
  P.resize(static_cast<size_t>(n * E));
  O.resize(static_cast<size_t>(n * d));
  log_normalizer.resize(static_cast<size_t>(n));
  const int m = static_cast<int>(E), nn = static_cast<int>(n), k = static_cast<int>(d);
  const double one = 1, zero = 0;
  dgemm_("T", "N", &m, &nn, &k, &one, s.K.data(), &k, Q, &k, &zero, P.data(), &m);
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  for (int64_t i = 0; i < n; ++i) {
    double* p = P.data() + i * E;
    double mx = -INFINITY;
    for (int64_t r = 0; r < E; ++r) mx = std::max(mx, p[r] /= sqrt_d);
    double sum = 0;
    for (int64_t r = 0; r < E; ++r) sum += (p[r] = std::exp(p[r] - mx));
    for (int64_t r = 0; r < E; ++r) p[r] /= sum;
    // log p_i + log-sum-exp restores the logit z_i = q·k_i/sqrt(d) up to a shared constant.
    log_normalizer[static_cast<size_t>(i)] = mx + std::log(sum);
  }
  dgemm_("N", "N", &k, &nn, &m, &one, s.V.data(), &k, P.data(), &m, &zero, O.data(), &k);
}

// The oracle keeps the `rows` largest p, ties by lower row. Its mass and its overlap with the kept
// rows need only the rows-th largest value t (nth_element on a copy of p, O(E)): every row above t,
// then the lowest-numbered rows equal to t until `rows` are taken.
void ReceiptMetrics::measure_oracle(const DenseReference& ref, int64_t E) {
  oracle = 0;
  recall = 1;
  if (rows == 0) return;
  scratch.assign(ref.p, ref.p + E);
  std::nth_element(scratch.begin(), scratch.begin() + (rows - 1), scratch.end(), std::greater<double>());
  const double t = scratch[static_cast<size_t>(rows - 1)];
  int64_t taken = 0, hit = 0;
  for (int64_t i = 0; i < E; ++i)
    if (ref.p[i] > t) {
      oracle += ref.p[i];
      hit += kept[i];
      ++taken;
    }
  for (int64_t i = 0; i < E && taken < rows; ++i)
    if (ref.p[i] == t) {
      oracle += t;
      hit += kept[i];
      ++taken;
    }
  recall = static_cast<double>(hit) / static_cast<double>(rows);
}

void ReceiptMetrics::measure(const DenseReference& ref, const CandidateReceipt& rc, const float* V, int64_t E,
                             int64_t d) {
  kept.assign(static_cast<size_t>(E), 0);
  ids.clear();
  for (const auto* list : {&rc.candidates, &rc.always_included})
    for (int64_t id : *list)
      if (id < E && !kept[id]) {
        kept[id] = 1;
        ids.push_back(id);
      }
  rows = static_cast<int64_t>(ids.size());
  // Ascending rows read V front to back (the gather is bound by memory, not arithmetic).
  std::sort(ids.begin(), ids.end());
  retained = 0;
  std::vector<double> kept_out(static_cast<size_t>(d), 0.0);
  for (int64_t i : ids) {
    retained += ref.p[i];
    for (int64_t t = 0; t < d; ++t) kept_out[t] += ref.p[i] * V[i * d + t];
  }
  measure_oracle(ref, E);
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
}

}  // namespace kvtool::eval
