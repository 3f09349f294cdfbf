#include "common/part_queries.h"

#include <algorithm>
#include <cmath>

#include "common/blas.h"
#include "kvtool/dump.h"

namespace kvtool {

std::vector<float> dump_part_queries(const PartInput& in, int64_t p0, int64_t p1) {
  const DumpReader& dump = *in.dump;
  const auto& info = dump.info();
  const int64_t d = in.head_dim;
  std::vector<float> out;
  if (!info.has_q) return out;
  const std::vector<int64_t> qpos = dump.q_positions();
  std::vector<size_t> sel;
  for (size_t j = 0; j < qpos.size(); ++j)
    if (qpos[j] >= p0 && qpos[j] < p1) sel.push_back(j);
  if (sel.empty()) return out;
  std::vector<float> Q(static_cast<size_t>(info.geo.q_tokens * d));
  for (int64_t h = 0; h < info.geo.q_heads; ++h) {
    if (info.id.q_to_kv_head[static_cast<size_t>(h)] != in.kv_head) continue;
    dump.read_q(in.layer, h, Q.data());
    for (size_t j : sel) out.insert(out.end(), Q.data() + static_cast<int64_t>(j) * d, Q.data() + (j + 1) * d);
  }
  return out;
}

namespace {

// Lower-triangular L (row-major [d, d]) with L Lᵀ = M for a symmetric positive semidefinite M.
std::vector<double> semidefinite_cholesky(std::vector<double> M, int64_t d) {
  double top = 0;
  for (int64_t i = 0; i < d; ++i) top = std::max(top, M[i * d + i]);
  std::vector<double> L(static_cast<size_t>(d * d), 0.0);
  for (int64_t j = 0; j < d; ++j) {
    double piv = M[j * d + j];
    for (int64_t t = 0; t < j; ++t) piv -= L[j * d + t] * L[j * d + t];
    if (!(piv > 1e-12 * top)) continue;  // column j stays 0
    const double r = std::sqrt(piv);
    L[j * d + j] = r;
    for (int64_t i = j + 1; i < d; ++i) {
      double v = M[i * d + j];
      for (int64_t t = 0; t < j; ++t) v -= L[i * d + t] * L[j * d + t];
      L[i * d + j] = v / r;
    }
  }
  return L;
}

}  // namespace

std::vector<float> query_metric_rows(const float* rows, int64_t n, int64_t d, const std::vector<float>& queries) {
  const int di = static_cast<int>(d), N = static_cast<int>(static_cast<int64_t>(queries.size()) / d);
  const float one = 1, zero = 0;
  // Qᵀ Q by BLAS (the builder pins BLAS to one thread: the same sums at any --threads).
  std::vector<float> gram(static_cast<size_t>(d * d), 0.f);
  if (N > 0) sgemm_("N", "T", &di, &di, &N, &one, queries.data(), &di, queries.data(), &di, &zero, gram.data(), &di);
  std::vector<double> M(gram.size());
  for (int64_t i = 0; i < d; ++i)  // symmetric: the lower triangle, mirrored
    for (int64_t j = 0; j <= i; ++j)
      M[i * d + j] = M[j * d + i] = static_cast<double>(gram[i * d + j]) / std::max(N, 1);
  const std::vector<double> L = semidefinite_cholesky(std::move(M), d);
  // x' = x L: row-major [n, d] times [d, d] is, column-major, Lᵀ-as-stored times the rows.
  std::vector<float> Lf(L.begin(), L.end()), out(static_cast<size_t>(n * d));
  const int ni = static_cast<int>(n);
  if (n > 0) sgemm_("N", "N", &di, &ni, &di, &one, Lf.data(), &di, rows, &di, &zero, out.data(), &di);
  return out;
}

}  // namespace kvtool
