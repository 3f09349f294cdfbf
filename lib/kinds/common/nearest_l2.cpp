#include "common/nearest_l2.h"

#include <faiss/Index.h>  // FAISS_VERSION_*
#include <faiss/utils/distances.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvtool/blas.h"
#include "common/x86_avx512.h"

namespace kvtool {

namespace {

using idx_t = faiss::Index::idx_t;

// One query row of a block: dis = (xn + yn[j]) - 2 ip[j] clamped at 0 (written back into ip), then
// the first j of the smallest dis, kept when it is below the best so far (strict <, as FAISS).
// Portable: the distances first (elementwise: the compiler vectorizes it), then the smallest value
// (8 running minima, so the compares do not wait on each other; a minimum is exact in any order),
// then its first position. Ties between +0 and -0 compare equal, as in FAISS' strict-< scan.
void nearest_in_block_portable(float* dis, idx_t cols, float xn, const float* yn, idx_t j0, float& best, idx_t& label) {
  for (idx_t j = 0; j < cols; ++j) {
    const float v = xn + yn[j] - 2 * dis[j];
    dis[j] = v < 0 ? 0 : v;
  }
  float lane[8] = {HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF};
  idx_t j = 0;
  for (; j + 8 <= cols; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] = dis[j + l] < lane[l] ? dis[j + l] : lane[l];
  for (; j < cols; ++j) lane[0] = dis[j] < lane[0] ? dis[j] : lane[0];
  const float low = *std::min_element(lane, lane + 8);
  if (best > low) {
    best = low;
    label = j0 + (std::find(dis, dis + cols, low) - dis);
  }
}

#if KVTOOL_KINDS_X86
KVTOOL_AVX512_WARNINGS_OFF
// The same arithmetic 16 columns at a time, in one pass: (xn + yn) - 2 ip by separate add, multiply
// and subtract (no fused multiply-add, though 2 ip is exact anyway), clamped by max(0, v), which
// like `v < 0 ? 0 : v` keeps a NaN and a -0; min(dis, lane) is `dis < lane ? dis : lane`, so NaNs
// never become the minimum, as in the portable scan. The position is found by a second compare.
__attribute__((target("avx512f"))) void nearest_in_block_avx512(float* dis, idx_t cols, float xn, const float* yn,
                                                                idx_t j0, float& best, idx_t& label) {
  const __m512 vxn = _mm512_set1_ps(xn), two = _mm512_set1_ps(2.f), zero = _mm512_setzero_ps();
  __m512 lane = _mm512_set1_ps(HUGE_VALF);
  idx_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m512 ip = _mm512_loadu_ps(dis + j);
    const __m512 v = _mm512_sub_ps(_mm512_add_ps(vxn, _mm512_loadu_ps(yn + j)), _mm512_mul_ps(two, ip));
    const __m512 c = _mm512_max_ps(zero, v);
    _mm512_storeu_ps(dis + j, c);
    lane = _mm512_min_ps(c, lane);
  }
  float low = _mm512_reduce_min_ps(lane);
  for (; j < cols; ++j) {
    const float v = xn + yn[j] - 2 * dis[j];
    dis[j] = v < 0 ? 0 : v;
    low = dis[j] < low ? dis[j] : low;
  }
  if (!(best > low)) return;
  best = low;
  const __m512 vlow = _mm512_set1_ps(low);
  for (idx_t k = 0; k + 16 <= cols; k += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(dis + k), vlow, _CMP_EQ_OQ);
    if (eq) {
      label = j0 + k + __builtin_ctz(eq);
      return;
    }
  }
  label = j0 + (std::find(dis + (cols / 16) * 16, dis + cols, low) - dis);
}

// The same on AVX2, 8 columns at a time (max and min as above: the same values, NaN and -0 alike).
__attribute__((target("avx2"))) void nearest_in_block_avx2(float* dis, idx_t cols, float xn, const float* yn, idx_t j0,
                                                           float& best, idx_t& label) {
  const __m256 vxn = _mm256_set1_ps(xn), two = _mm256_set1_ps(2.f), zero = _mm256_setzero_ps();
  __m256 lane = _mm256_set1_ps(HUGE_VALF);
  idx_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    const __m256 ip = _mm256_loadu_ps(dis + j);
    const __m256 v = _mm256_sub_ps(_mm256_add_ps(vxn, _mm256_loadu_ps(yn + j)), _mm256_mul_ps(two, ip));
    const __m256 c = _mm256_max_ps(zero, v);
    _mm256_storeu_ps(dis + j, c);
    lane = _mm256_min_ps(c, lane);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, lane);
  float low = HUGE_VALF;
  for (float x : lanes) low = x < low ? x : low;
  for (; j < cols; ++j) {
    const float v = xn + yn[j] - 2 * dis[j];
    dis[j] = v < 0 ? 0 : v;
    low = dis[j] < low ? dis[j] : low;
  }
  if (!(best > low)) return;
  best = low;
  const __m256 vlow = _mm256_set1_ps(low);
  for (idx_t k = 0; k + 8 <= cols; k += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(dis + k), vlow, _CMP_EQ_OQ));
    if (eq) {
      label = j0 + k + __builtin_ctz(static_cast<unsigned>(eq));
      return;
    }
  }
  label = j0 + (std::find(dis + (cols / 8) * 8, dis + cols, low) - dis);
}
KVTOOL_AVX512_WARNINGS_ON

void nearest_in_block(float* dis, idx_t cols, float xn, const float* yn, idx_t j0, float& best, idx_t& label) {
  if (cpu_has_avx512f()) return nearest_in_block_avx512(dis, cols, xn, yn, j0, best, label);
  if (cpu_features().avx2) return nearest_in_block_avx2(dis, cols, xn, yn, j0, best, label);
  nearest_in_block_portable(dis, cols, xn, yn, j0, best, label);
}
#else
void nearest_in_block(float* dis, idx_t cols, float xn, const float* yn, idx_t j0, float& best, idx_t& label) {
  nearest_in_block_portable(dis, cols, xn, yn, j0, best, label);
}
#endif

// FAISS 1.7.3's blocked products for k = 1 (exhaustive_L2sqr_blas, exhaustive_inner_product_blas):
// query blocks of distance_compute_blas_query_bs rows, database blocks of
// distance_compute_blas_database_bs, ip = the same sgemm; `row(ip_row, cols, i, j0)` then takes one
// query row of a block. The block buffer is sized to the largest block used, not FAISS' fixed
// bs_x * bs_y floats (16 MiB per search, which under ASan costs its shadow's page faults each time).
template <class Row>
void blocked_products(const float* x, idx_t n, const float* y, idx_t ny, idx_t d, std::vector<float>& ip, Row row) {
  const auto bs_x = static_cast<idx_t>(faiss::distance_compute_blas_query_bs);
  const auto bs_y = static_cast<idx_t>(faiss::distance_compute_blas_database_bs);
  ip.resize(static_cast<size_t>(std::min(bs_x, n) * std::min(bs_y, ny)));
  for (idx_t i0 = 0; i0 < n; i0 += bs_x) {
    const idx_t i1 = std::min(n, i0 + bs_x);
    for (idx_t j0 = 0; j0 < ny; j0 += bs_y) {
      const idx_t j1 = std::min(ny, j0 + bs_y);
      const float one = 1, zero = 0;
      const int nyi = static_cast<int>(j1 - j0), nxi = static_cast<int>(i1 - i0), di = static_cast<int>(d);
      sgemm_("Transpose", "Not transpose", &nyi, &nxi, &di, &one, y + j0 * d, &di, x + i0 * d, &di, &zero, ip.data(),
             &nyi);
      for (idx_t i = i0; i < i1; ++i) row(ip.data() + (i - i0) * (j1 - j0), j1 - j0, i, j0);
    }
  }
}

// Another FAISS release may round or break ties otherwise: it answers for itself.
constexpr bool kSameFaiss = FAISS_VERSION_MAJOR == 1 && FAISS_VERSION_MINOR == 7 && FAISS_VERSION_PATCH == 3;

}  // namespace

// The arithmetic is FAISS 1.7.3's exhaustive_L2sqr_blas (Debian's build, without its AVX2 variant)
// with a SingleBestResultHandler, step for step: dis = (|x|^2 + |y|^2) - 2 ip in float clamped at
// 0, and the first j with the smallest dis (strict <, from HUGE_VALF). The pq fixtures and the
// byte-equality test against a plain IndexFlatL2 (tests/unit) hold it to that.
void TrainingIndexL2::search(idx_t n, const float* x, idx_t k, float* distances, idx_t* labels,
                             const faiss::SearchParameters* params) const {
  if (!kSameFaiss || k != 1 || params || n < faiss::distance_compute_blas_threshold || ntotal == 0)
    return faiss::IndexFlatL2::search(n, x, k, distances, labels, params);
  if (norms_of_ != x || norms_count_ != n) {
    x_norms_.resize(static_cast<size_t>(n));
    faiss::fvec_norms_L2sqr(x_norms_.data(), x, static_cast<size_t>(d), static_cast<size_t>(n));
    norms_of_ = x;
    norms_count_ = n;
  }
  const float* y = get_xb();
  y_norms_.resize(static_cast<size_t>(ntotal));
  faiss::fvec_norms_L2sqr(y_norms_.data(), y, static_cast<size_t>(d), static_cast<size_t>(ntotal));
  std::fill(distances, distances + n, HUGE_VALF);
  blocked_products(x, n, y, ntotal, d, ip_, [&](float* ip, idx_t cols, idx_t i, idx_t j0) {
    nearest_in_block(ip, cols, x_norms_[static_cast<size_t>(i)], y_norms_.data() + j0, j0, distances[i], labels[i]);
  });
}

// FAISS 1.7.3's knn_inner_product for k = 1: a HeapResultHandler<CMin> of one entry, i.e. from
// (lowest float, label -1) the first j with the largest product (strict <: a tie keeps the earlier
// j, a NaN never replaces). The byte-equality test against a plain IndexFlatIP holds it to that.
void TrainingIndexIP::search(idx_t n, const float* x, idx_t k, float* distances, idx_t* labels,
                             const faiss::SearchParameters* params) const {
  if (!kSameFaiss || k != 1 || params || n < faiss::distance_compute_blas_threshold || ntotal == 0)
    return faiss::IndexFlatIP::search(n, x, k, distances, labels, params);
  std::fill(distances, distances + n, std::numeric_limits<float>::lowest());
  std::fill(labels, labels + n, idx_t{-1});
  blocked_products(x, n, get_xb(), ntotal, d, ip_, [&](const float* ip, idx_t cols, idx_t i, idx_t j0) {
    float best = distances[i];
    idx_t label = labels[i];
    for (idx_t j = 0; j < cols; ++j)
      if (best < ip[j]) {
        best = ip[j];
        label = j0 + j;
      }
    distances[i] = best;
    labels[i] = label;
  });
}

}  // namespace kvtool
