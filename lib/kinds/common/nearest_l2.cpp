#include "common/nearest_l2.h"

#include <faiss/Index.h>  // FAISS_VERSION_*
#include <faiss/utils/distances.h>

#include <algorithm>
#include <cmath>

// Fortran BLAS (OpenBLAS through FAISS's link), the call FAISS itself makes.
extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                      const float* beta, float* c, const int* ldc);

namespace kvtool {

// The arithmetic is FAISS 1.7.3's exhaustive_L2sqr_blas (Debian's build, without its AVX2 variant) with a
// SingleBestResultHandler, step for step: query blocks of distance_compute_blas_query_bs rows, database blocks of
// distance_compute_blas_database_bs, ip = the same sgemm, dis = (|x|^2 + |y|^2) - 2 ip in float
// clamped at 0, and the first j with the smallest dis (strict <, from HUGE_VALF). The pq fixtures
// and the byte-equality test against a plain IndexFlatL2 (tests/unit) hold it to that.
void TrainingIndexL2::search(idx_t n, const float* x, idx_t k, float* distances, idx_t* labels,
                             const faiss::SearchParameters* params) const {
  // Another FAISS release may round or break ties otherwise: it answers for itself.
  constexpr bool kSameFaiss = FAISS_VERSION_MAJOR == 1 && FAISS_VERSION_MINOR == 7 && FAISS_VERSION_PATCH == 3;
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
  const auto bs_x = static_cast<idx_t>(faiss::distance_compute_blas_query_bs);
  const auto bs_y = static_cast<idx_t>(faiss::distance_compute_blas_database_bs);
  ip_.resize(static_cast<size_t>(std::min(bs_x, n) * std::min(bs_y, ntotal)));  // the largest block used
  for (idx_t i0 = 0; i0 < n; i0 += bs_x) {
    const idx_t i1 = std::min(n, i0 + bs_x);
    std::fill(distances + i0, distances + i1, HUGE_VALF);
    for (idx_t j0 = 0; j0 < ntotal; j0 += bs_y) {
      const idx_t j1 = std::min(ntotal, j0 + bs_y);
      const float one = 1, zero = 0;
      const int nyi = static_cast<int>(j1 - j0), nxi = static_cast<int>(i1 - i0), di = static_cast<int>(d);
      sgemm_("Transpose", "Not transpose", &nyi, &nxi, &di, &one, y + j0 * d, &di, x + i0 * d, &di, &zero, ip_.data(),
             &nyi);
      for (idx_t i = i0; i < i1; ++i) {
        // The distances of the row first (elementwise: the compiler vectorizes it), then its
        // first minimum: one loop doing both would be a dependent chain of compares.
        float* dis = ip_.data() + (i - i0) * (j1 - j0);
        const float xn = x_norms_[static_cast<size_t>(i)];
        const float* yn = y_norms_.data() + j0;
        for (idx_t j = 0; j < j1 - j0; ++j) {
          const float v = xn + yn[j] - 2 * dis[j];
          dis[j] = v < 0 ? 0 : v;
        }
        // The first minimum: the smallest value (8 running minima, so the compares do not wait on
        // each other; a minimum is exact in any order), then its first position. Ties between
        // +0 and -0 compare equal, as in FAISS' strict-< scan.
        const idx_t cols = j1 - j0;
        float lane[8] = {HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF, HUGE_VALF};
        idx_t j = 0;
        for (; j + 8 <= cols; j += 8)
          for (int l = 0; l < 8; ++l) lane[l] = dis[j + l] < lane[l] ? dis[j + l] : lane[l];
        for (; j < cols; ++j) lane[0] = dis[j] < lane[0] ? dis[j] : lane[0];
        const float low = *std::min_element(lane, lane + 8);
        if (distances[i] > low) {
          distances[i] = low;
          labels[i] = j0 + (std::find(dis, dis + cols, low) - dis);
        }
      }
    }
  }
}

}  // namespace kvtool
