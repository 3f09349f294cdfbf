// SimHash (kvtool/scoring.h: simhash_products, simhash_codes, collision_counts), the arithmetic of
// lsh's build and query; its SIMD products are in scoring_avx2.cpp and scoring_avx512.cpp.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvtool/scoring.h"
#include "scoring_kernels.h"

namespace kvtool::scoring {

// ---- SimHash products --------------------------------------------------------------------------
// Column c of row i starts at 0 and adds x[i][j] * w[j][c] for j = 0, 1, ... in float without FMA
// at every level; the SIMD levels vectorize over columns (and keep several rows in registers), so
// the order of each column's additions never changes.

namespace {

void simhash_products_portable(const float* x, int64_t from, int64_t rows, int64_t d, const float* w, int64_t cols,
                               float* out) {
  for (int64_t i = from; i < rows; ++i) {
    float* o = out + i * cols;
    std::fill(o, o + cols, 0.f);
    for (int64_t j = 0; j < d; ++j) {
      const float xj = x[i * d + j];
      const float* wr = w + j * cols;
      for (int64_t c = 0; c < cols; ++c) o[c] += xj * wr[c];
    }
  }
}

}  // namespace

void simhash_products(const float* x, int64_t rows, int64_t d, const float* w, int64_t cols, float* out) {
#if KVTOOL_X86_TARGETS
  const Simd level = simd_level();
  if (level == Simd::avx512) return detail::simhash_products_avx512(x, rows, d, w, cols, out);
  if (level == Simd::avx2) return detail::simhash_products_avx2(x, rows, d, w, cols, out);
#endif
  simhash_products_portable(x, 0, rows, d, w, cols, out);
}

void simhash_codes(const float* q, int64_t d, const float* w, int64_t bits, int64_t tables, uint32_t* codes) {
  const int64_t cols = bits * tables;
  thread_local std::vector<float> s;  // reused: no allocation once the thread has seen this size
  s.resize(static_cast<size_t>(cols));
  simhash_products(q, 1, d, w, cols, s.data());
  for (int64_t t = 0; t < tables; ++t) {
    uint32_t code = 0;
    for (int64_t b = 0; b < bits; ++b) code |= static_cast<uint32_t>(s[t * bits + b] > 0.f) << b;
    codes[t] = code;
  }
}

void collision_counts(const uint32_t* codes, const uint32_t* offsets, const uint32_t* ids, int64_t tables,
                      int64_t buckets, int64_t n, int64_t base, uint16_t* count) {
  for (int64_t t = 0; t < tables; ++t) {
    const uint32_t c = codes[t];
    const uint32_t* off = offsets + t * (buckets + 1);
    const uint32_t* tid = ids + t * n;
    for (uint32_t i = off[c]; i < off[c + 1]; ++i) ++count[tid[i] - base];
  }
}

}  // namespace kvtool::scoring
