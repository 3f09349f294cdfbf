// The AVX2 kernels of the query arithmetic (scoring_kernels.h): eight lanes, the same bits as the
// portable loops. Only called where simd_level() is avx2, so a CPU without it never meets them.
#include <algorithm>
#include <cstdint>

#include "scoring_kernels.h"

#if KVTOOL_X86_TARGETS

namespace kvtool::scoring::detail {

// GCC 12 warns inside its own intrinsics headers (an intentionally undefined pass-through operand of
// the conversion and gather intrinsics): not a use of uninitialized data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

template <typename Code>
__attribute__((target("avx2"))) __m256i load8_idx(const Code* c) {
  if constexpr (sizeof(Code) == 1)
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  else
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
}

}  // namespace

// AVX2: eight rows per gather from the subspace's table; rows [from, to) of n.
template <typename Code>
__attribute__((target("avx2"))) void cm_avx2(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k,
                                             float* score, int64_t from, int64_t to) {
  const int64_t end8 = from + (to - from) / 8 * 8;
  for (int64_t j = 0; j < m; ++j) {
    const float* t = lut + j * k;
    const Code* c = codes + j * n;
    for (int64_t i = from; i < end8; i += 8) {
      const __m256 v = _mm256_i32gather_ps(t, load8_idx(c + i), 4);
      const __m256 acc = j == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(score + i);
      _mm256_storeu_ps(score + i, _mm256_add_ps(acc, v));
    }
  }
  cm_portable(lut, codes, n, m, k, score, end8, to);
}

template void cm_avx2<uint8_t>(const float*, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
template void cm_avx2<uint16_t>(const float*, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// AVX2: four rows x two vectors of 8 columns; the columns past the last whole vector one at a time.
__attribute__((target("avx2"))) void simhash_products_avx2(const float* x, int64_t rows, int64_t d, const float* w,
                                                           int64_t cols, float* out) {
  constexpr int64_t R = 4;
  const int64_t vec_cols = cols / 8 * 8;
  for (int64_t i0 = 0; i0 < rows; i0 += R) {
    const int64_t nr = std::min(R, rows - i0);
    for (int64_t c0 = 0; c0 < vec_cols; c0 += 16) {
      const int nv = c0 + 16 <= vec_cols ? 2 : 1;
      __m256 acc[R][2] = {};
      for (int64_t j = 0; j < d; ++j) {
        const __m256 w0 = _mm256_loadu_ps(w + j * cols + c0);
        const __m256 w1 = nv == 2 ? _mm256_loadu_ps(w + j * cols + c0 + 8) : w0;
        for (int64_t r = 0; r < nr; ++r) {
          const __m256 xr = _mm256_set1_ps(x[(i0 + r) * d + j]);
          acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(xr, w0));
          acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(xr, w1));
        }
      }
      for (int64_t r = 0; r < nr; ++r)
        for (int v = 0; v < nv; ++v) _mm256_storeu_ps(out + (i0 + r) * cols + c0 + 8 * v, acc[r][v]);
    }
    for (int64_t r = i0; r < i0 + nr; ++r)
      for (int64_t c = vec_cols; c < cols; ++c) {
        float sum = 0.f;
        for (int64_t j = 0; j < d; ++j) sum += x[r * d + j] * w[j * cols + c];
        out[r * cols + c] = sum;
      }
  }
}

}  // namespace kvtool::scoring::detail

#endif
