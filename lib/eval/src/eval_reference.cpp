// The dense reference and the metrics of `kvtool eval` (lib/offline/impl/eval_parts.h).
#include <algorithm>
#include <bit>
#include <functional>
#include <cmath>
#include <cstring>
#include <numeric>

#include "impl/eval_parts.h"
#include "impl/eval_kernels.h"

#include <sys/mman.h>

// Fortran BLAS (OpenBLAS through FAISS's link), column-major.
extern "C" int dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                      const double* beta, double* c, const int* ldc);

namespace kvtool::eval {

void advise_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t huge = uintptr_t{1} << 21;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(huge - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // advice only: failure is harmless
#else
  (void)p;
  (void)bytes;
#endif
}

void DenseSupport::load(const float* k, const float* v, int64_t rows, int64_t dim) {
  K = k;
  V = v;
  E = rows;
  d = dim;
}

const double* DenseSupport::tile(const float* m, int64_t r0, int64_t rows, std::vector<double>& t) const {
  t.resize(static_cast<size_t>(rows * d));
  widen(m + r0 * d, t.data(), rows * d, scoring::simd_level());
  return t.data();
}

int64_t DenseBlock::block_rows(int64_t E) {
  return std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(E, 1), 1, 256);
}

namespace {

// Column-major dgemm C[m, n] = alpha op(A)[m, k] · B[k, n] + beta C, op(A) = A or A^T ("N" / "T").
void gemm(const char* transa, int64_t m, int64_t n, int64_t k, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  const int mm = static_cast<int>(m), nn = static_cast<int>(n), kk = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  dgemm_(transa, "N", &mm, &nn, &kk, &alpha, A, &la, B, &lb, &beta, C, &lc);
}

}  // namespace

// Row-major Z[count, E] = Q[count, d] · K^T is column-major Z^T = K^T' · Q^T: dgemm("T", "N") over
// the row-major K (column-major [d, E]), scaled by 1/sqrt(d) in the GEMM, one tile of rows (a
// slice of Z^T with leading dimension E) at a time; O[count, d] = P · V is column-major
// O^T = V^T · P^T, accumulated over the tiles.
void DenseBlock::compute(const double* Q, int64_t count, const DenseSupport& s, OracleIndex* oracle) {
  n = count;
  E = s.E;
  d = s.d;
  if (oracle) oracle->start(*this);
  reserve_huge(P, static_cast<size_t>(n * E));
  P.resize(static_cast<size_t>(n * E));
  O.resize(static_cast<size_t>(n * d));
  log_normalizer.resize(static_cast<size_t>(n));
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  for (int64_t r0 = 0; r0 < E; r0 += DenseSupport::kTileRows) {
    const int64_t rows = std::min(DenseSupport::kTileRows, E - r0);
    gemm("T", rows, n, d, scale, s.tile(s.K, r0, rows, tile), d, Q, d, 0, P.data() + r0, E);
  }
  // log p_i + log-sum-exp restores the logit z_i = q·k_i/sqrt(d) up to a shared constant.
  const scoring::Simd level = scoring::simd_level();
  for (int64_t i = 0; i < n; ++i) {
    log_normalizer[static_cast<size_t>(i)] = softmax_row(P.data() + i * E, E, level);
    if (oracle) oracle->add_row(i);
  }
  for (int64_t r0 = 0; r0 < E; r0 += DenseSupport::kTileRows) {
    const int64_t rows = std::min(DenseSupport::kTileRows, E - r0);
    gemm("N", d, n, rows, 1, s.tile(s.V, r0, rows, tile), d, P.data() + r0, E, r0 > 0 ? 1 : 0, O.data(), d);
  }
}

namespace {

// p >= 0, so its bits order like its value: the bucket is the exponent and 4 leading mantissa bits
// above 2^-126; bucket 0 holds every smaller p (0 included). Any order-preserving bucketing keeps
// the oracle exact: the threshold bucket is resolved row by row.
uint16_t bucket_of(double p) {
  uint64_t bits = 0;
  std::memcpy(&bits, &p, sizeof bits);
  constexpr uint64_t base = uint64_t{1023 - 126} << 4;
  const uint64_t top = bits >> 48;
  return static_cast<uint16_t>(std::min<uint64_t>(top > base ? top - base : 0, OracleIndex::kBuckets - 1));
}

}  // namespace

void OracleIndex::build(const DenseBlock& b) {
  start(b);
  for (int64_t i = 0; i < b.n; ++i) add_row(i);
}

void OracleIndex::start(const DenseBlock& b) {
  b_ = &b;
  reserve_huge(key_, static_cast<size_t>(b.n * b.E));
  key_.resize(static_cast<size_t>(b.n * b.E));
  count_.assign(static_cast<size_t>(b.n * kBuckets), 0);
  mass_.assign(count_.size(), 0.0);
}

void OracleIndex::add_row(int64_t i) {
  const int64_t E = b_->E;
  const double* p = b_->P.data() + i * E;
  uint16_t* key = key_.data() + i * E;
  int64_t* count = count_.data() + i * kBuckets;
  double* mass = mass_.data() + i * kBuckets;
  for (int64_t r = 0; r < E; ++r) {
    key[r] = bucket_of(p[r]);
    ++count[key[r]];
    mass[key[r]] += p[r];
  }
}

// Whole buckets from the top while they fit in `rows`; the rest are the largest p of the next
// bucket, ties by lower row (a selection among that bucket's rows only).
void OracleIndex::measure(int64_t i, int64_t rows, const std::vector<int64_t>& ids, const std::vector<uint64_t>& kept,
                          double& mass, int64_t& hits) {
  mass = 0;
  hits = 0;
  if (rows <= 0) return;
  const int64_t E = b_->E;
  const double* p = b_->P.data() + i * E;
  const uint16_t* key = key_.data() + i * E;
  const int64_t* count = count_.data() + i * kBuckets;
  int64_t above = 0, t = kBuckets - 1;
  for (; t > 0 && above + count[t] < rows; --t) {
    above += count[t];
    mass += mass_[static_cast<size_t>(i * kBuckets + t)];
  }
  for (int64_t id : ids) hits += key[id] > t;
  tied_.clear();
  for (int64_t r = 0; r < E; ++r)
    if (key[r] == t) tied_.push_back(r);
  const auto need = static_cast<size_t>(rows - above);
  std::nth_element(tied_.begin(), tied_.begin() + static_cast<std::ptrdiff_t>(need - 1), tied_.end(),
                   [p](int64_t a, int64_t c) { return p[a] > p[c] || (p[a] == p[c] && a < c); });
  for (size_t k = 0; k < need; ++k) {
    mass += p[tied_[k]];
    hits += row_bit(kept, tied_[k]);
  }
}

void ReceiptMetrics::measure(const DenseReference& ref, const CandidateReceipt& rc, OracleIndex& oi, int64_t i,
                             int64_t E) {
  kept.assign(static_cast<size_t>((E + 63) / 64), 0);
  for (const auto* list : {&rc.candidates, &rc.always_included})
    for (int64_t id : *list)
      if (id >= 0 && id < E) kept[static_cast<size_t>(id >> 6)] |= uint64_t{1} << (id & 63);
  // The kept rows ascending, a bitmap word at a time: linear in the words and the kept rows, where a
  // flag byte per row cost a pass over all E (and sorting the rows cost more).
  ids.clear();
  for (size_t wd = 0; wd < kept.size(); ++wd)
    for (uint64_t b = kept[wd]; b != 0; b &= b - 1) ids.push_back(static_cast<int64_t>(wd * 64) + std::countr_zero(b));
  rows = static_cast<int64_t>(ids.size());
  w.resize(ids.size());
  retained = 0;
  for (size_t k = 0; k < ids.size(); ++k) retained += (w[k] = ref.p[ids[k]]);
  int64_t hits = 0;
  oi.measure(i, rows, ids, kept, oracle, hits);
  recall = rows > 0 ? static_cast<double>(hits) / static_cast<double>(rows) : 1;
  fraction = static_cast<double>(rows) / static_cast<double>(E);
}

void ReceiptMetrics::output(const DenseReference& ref, const double* kept_out, int64_t d) {
  double err = 0, on = 0;
  for (int64_t t = 0; t < d; ++t) {
    double diff = (retained > 0 ? kept_out[t] / retained : 0) - ref.o[t];
    err += diff * diff;
    on += ref.o[t] * ref.o[t];
  }
  error = std::sqrt(err);
  output_norm = std::sqrt(on);
  relative_error = on > 0 ? error / output_norm : 0;
}

bool KeptOutputs::use_gemm(const std::vector<ReceiptMetrics>& m, int64_t n, int64_t E) {
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += m[static_cast<size_t>(i)].rows;
  // Measured at 32K rows, d = 128 (pq, budgets 0.1 to 0.5; docs/reports/performance.md, "Scale": eval): the
  // tiled gather took 15 % less CPU than the GEMM at 10 % kept, the same at 20-30 %, more above.
  // A speed choice only: both sum the same terms, rounded differently (the gather adds rows in
  // ascending order, the GEMM as OpenBLAS blocks it), so the output errors move in their last bits.
  return kept * 4 >= n * E;
}

void KeptOutputs::compute(const DenseBlock& b, const std::vector<ReceiptMetrics>& m, const DenseSupport& s) {
  const int64_t n = b.n, E = b.E, d = b.d, R = DenseSupport::kTileRows;
  out.assign(static_cast<size_t>(n * d), 0.0);
  next.assign(static_cast<size_t>(n), 0);
  if (!use_gemm(m, n, E)) {
    const scoring::Simd level = scoring::simd_level();
    // Tiles of rows outer, queries inner: a tile of V (1 MiB of floats at d = 128) stays in cache
    // while every query adds its kept rows in it. Each query still sums its rows in ascending order.
    for (int64_t r0 = 0; r0 < E; r0 += R) {
      const int64_t r1 = std::min(E, r0 + R);
      for (int64_t i = 0; i < n; ++i) {
        const auto& ids = m[static_cast<size_t>(i)].ids;
        size_t& k = next[static_cast<size_t>(i)];
        const size_t k0 = k;
        while (k < ids.size() && ids[k] < r1) ++k;
        add_rows(m[static_cast<size_t>(i)].w.data() + k0, ids.data() + k0, k - k0, s.V, d, out.data() + i * d, level);
      }
    }
    return;
  }
  // Per tile of rows: the kept p of every query in `masked` (all zeros otherwise), one GEMM
  // against the tile of V, then those entries cleared again.
  if (masked.size() < static_cast<size_t>(n * R)) {
    reserve_huge(masked, static_cast<size_t>(n * R));
    masked.resize(static_cast<size_t>(n * R), 0.0);
  }
  std::vector<size_t> first(static_cast<size_t>(n));
  for (int64_t r0 = 0; r0 < E; r0 += R) {
    const int64_t rows = std::min(R, E - r0);
    for (int64_t i = 0; i < n; ++i) {
      const auto& ids = m[static_cast<size_t>(i)].ids;
      size_t& k = next[static_cast<size_t>(i)];
      first[static_cast<size_t>(i)] = k;
      const auto& w = m[static_cast<size_t>(i)].w;
      for (; k < ids.size() && ids[k] < r0 + rows; ++k) masked[i * R + ids[k] - r0] = w[k];
    }
    gemm("N", d, n, rows, 1, s.tile(s.V, r0, rows, tile), d, masked.data(), R, 1, out.data(), d);
    for (int64_t i = 0; i < n; ++i) {
      const auto& ids = m[static_cast<size_t>(i)].ids;
      for (size_t k = first[static_cast<size_t>(i)]; k < next[static_cast<size_t>(i)]; ++k)
        masked[i * R + ids[k] - r0] = 0;
    }
  }
}

}  // namespace kvtool::eval
