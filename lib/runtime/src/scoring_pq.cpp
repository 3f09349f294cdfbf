// PQ scoring (kvtool/scoring.h): lookup tables, row-major and column-major scans, the group scans of
// the query heads that share a kv head's codes, and the codes' column-major layout. The SIMD kernels
// are in scoring_avx2.cpp and scoring_avx512.cpp; the level is simd_level()'s.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvtool/scoring.h"
#include "scoring_kernels.h"

// SSE2 is in every x86-64 CPU: the codes' layout change (codes_to_column_major) needs no dispatch.
#if defined(__SSE2__) && !defined(__CUDACC__)
#define KVTOOL_SSE2 1
#include <emmintrin.h>
#else
#define KVTOOL_SSE2 0
#endif

namespace kvtool::scoring {

using detail::cm_portable;
using detail::lut_t_portable;

void pq_lut(const float* q, const float* centroids, int64_t m, int64_t k, int64_t dsub, float* lut) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < k; ++c) {
      const float* cen = centroids + (j * k + c) * dsub;
      float s = 0;
      for (int64_t t = 0; t < dsub; ++t) s += q[j * dsub + t] * cen[t];
      lut[j * k + c] = s;
    }
}

namespace {
template <typename Code>
void pq_scores(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k, float* score) {
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += lut[j * k + codes[i * m + j]];
    score[i] = s;
  }
}
}  // namespace

void pq_scores_u8(const float* lut, const uint8_t* codes, int64_t n, int64_t m, int64_t k, float* score) {
  pq_scores(lut, codes, n, m, k, score);
}
void pq_scores_u16(const float* lut, const uint16_t* codes, int64_t n, int64_t m, int64_t k, float* score) {
  pq_scores(lut, codes, n, m, k, score);
}

// ---- Column-major scoring with run-time dispatch ------------------------------------------------
// score[i] = 0 + lut[0][c0] + lut[1][c1] + ...: each level adds subspace j into every row before
// subspace j + 1, which is the same sequence of float additions per row as the row-major loop.

namespace {

// The rows of a group pass that stay in L1 while every query of the group reads them.
constexpr int64_t kGroupBlock = 1024;

template <typename Code>
void pq_scores_cm(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k, float* score) {
  if (n <= 0) return;
  if (m <= 0) {
    std::fill(score, score + n, 0.f);
    return;
  }
#if KVTOOL_X86_TARGETS
  const Simd level = simd_level();
  if (level == Simd::avx512) return detail::cm_avx512(lut, codes, n, m, k, score, 0, n);
  if (level == Simd::avx2) return detail::cm_avx2(lut, codes, n, m, k, score, 0, n);
#endif
  cm_portable(lut, codes, n, m, k, score, 0, n);
}

template <typename Code>
void pq_scores_cm_group(const float* luts, int64_t g, const Code* codes, int64_t n, int64_t m, int64_t k,
                        float* scores) {
  if (n <= 0 || g <= 0) return;
  if (m <= 0) {
    std::fill(scores, scores + g * n, 0.f);
    return;
  }
#if KVTOOL_X86_TARGETS
  const Simd level = simd_level();
  // Tables of at most 64 entries fit registers (cm_avx512) for one query at a time: the blocked
  // loop below, which measured faster than the four queries' tables read from L1.
  if (level == Simd::avx512 && k > 64) return detail::cm_groups_avx512(luts, g, codes, n, m, k, scores);
#endif
  // Blocks of rows, each scored for every query while its codes are in L1.
  for (int64_t b = 0; b < n; b += kGroupBlock) {
    const int64_t e = std::min(n, b + kGroupBlock);
    for (int64_t q = 0; q < g; ++q) {
#if KVTOOL_X86_TARGETS
      if (level == Simd::avx512) {
        detail::cm_avx512(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
        continue;
      }
      if (level == Simd::avx2) {
        detail::cm_avx2(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
        continue;
      }
#endif
      cm_portable(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
    }
  }
}

}  // namespace

namespace detail {

void lut_t_portable(const float* q, const float* ct, int64_t m, int64_t k, int64_t dsub, float* lut, int64_t from) {
  for (int64_t j = 0; j < m; ++j) {
    float* out = lut + j * k;
    for (int64_t c = from; c < k; ++c) out[c] = 0.f;
    for (int64_t t = 0; t < dsub; ++t) {
      const float qt = q[j * dsub + t];
      const float* row = ct + (j * dsub + t) * k;
      for (int64_t c = from; c < k; ++c) out[c] += qt * row[c];
    }
  }
}

}  // namespace detail

void pq_scores_cm_u8(const float* lut, const uint8_t* codes, int64_t n, int64_t m, int64_t k, float* score) {
  pq_scores_cm(lut, codes, n, m, k, score);
}
void pq_scores_cm_group_u8(const float* luts, int64_t g, const uint8_t* codes, int64_t n, int64_t m, int64_t k,
                           float* scores) {
  pq_scores_cm_group(luts, g, codes, n, m, k, scores);
}
void pq_scores_cm_group_u16(const float* luts, int64_t g, const uint16_t* codes, int64_t n, int64_t m, int64_t k,
                            float* scores) {
  pq_scores_cm_group(luts, g, codes, n, m, k, scores);
}

void pq_lut_t(const float* q, const float* centroids_t, int64_t m, int64_t k, int64_t dsub, float* lut) {
#if KVTOOL_X86_TARGETS
  if (simd_level() == Simd::avx512) return detail::lut_t_avx512(q, centroids_t, m, k, dsub, lut);
  if (simd_level() == Simd::avx2) return detail::lut_t_avx2(q, centroids_t, m, k, dsub, lut);
#endif
  lut_t_portable(q, centroids_t, m, k, dsub, lut, 0);
}
void pq_scores_cm_u16(const float* lut, const uint16_t* codes, int64_t n, int64_t m, int64_t k, float* score) {
  pq_scores_cm(lut, codes, n, m, k, score);
}

// ---- Codes into the column-major layout ---------------------------------------------------------

namespace {

// Rows [from, n) one byte at a time (the portable path, and the rows the SIMD blocks leave).
void codes_to_column_major_rows(const uint8_t* codes, int64_t n, int64_t m, int64_t from, uint8_t* out) {
  constexpr int64_t kBlock = 256;  // the block's rows stay in L1 while each subspace's run is written
  for (int64_t i0 = from; i0 < n; i0 += kBlock) {
    const int64_t i1 = std::min(n, i0 + kBlock);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = i0; i < i1; ++i) out[j * n + i] = codes[i * m + j];
  }
}

#if KVTOOL_SSE2
// The even and the odd bytes of a:b (32 bytes) into 16 each.
inline void split_even_odd(__m128i a, __m128i b, __m128i& even, __m128i& odd) {
  const __m128i low = _mm_set1_epi16(0xff);
  even = _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low));
  odd = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}

// r[0..M) holds 16 rows of M codes (row-major): halving the interleave log2(M) times leaves one
// register per column; columns col0, col0 + step, ... of rows i..i+15 are stored.
template <int M>
void store_split_columns(const __m128i* r, int64_t col0, int64_t step, uint8_t* out, int64_t n, int64_t i) {
  if constexpr (M == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + col0 * n + i), r[0]);
  } else {
    __m128i even[M / 2], odd[M / 2];
    for (int k = 0; k < M / 2; ++k) split_even_odd(r[2 * k], r[2 * k + 1], even[k], odd[k]);
    store_split_columns<M / 2>(even, col0, 2 * step, out, n, i);
    store_split_columns<M / 2>(odd, col0 + step, 2 * step, out, n, i);
  }
}

// m = M in {2, 4, 8}: 16 rows (M registers) at a time. Returns the rows done.
template <int M>
int64_t split_columns(const uint8_t* codes, int64_t n, uint8_t* out) {
  int64_t i = 0;
  for (__m128i r[M]; i + 16 <= n; i += 16) {
    for (int k = 0; k < M; ++k) r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i * M + 16 * k));
    store_split_columns<M>(r, 0, 1, out, n, i);
  }
  return i;
}

// The 16 x 16 byte tile at src (row stride `stride`) transposed into dst (row stride `dst_stride`).
void transpose_16x16(const uint8_t* src, int64_t stride, uint8_t* dst, int64_t dst_stride) {
  __m128i a[16], b[16];
  for (int k = 0; k < 16; ++k) a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k * stride));
  for (int k = 0; k < 8; ++k) {  // b[k]: rows 2k, 2k+1 interleaved, columns 0-7; b[k + 8]: 8-15
    b[k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
    b[k + 8] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
  }
  for (int h = 0; h < 16; h += 8)  // a[4g + k]: columns 4g..4g+3, 4 bytes each (rows 4k..4k+3)
    for (int k = 0; k < 4; ++k) {
      a[h + k] = _mm_unpacklo_epi16(b[h + 2 * k], b[h + 2 * k + 1]);
      a[h + k + 4] = _mm_unpackhi_epi16(b[h + 2 * k], b[h + 2 * k + 1]);
    }
  for (int g = 0; g < 16; g += 4)  // b[g + k]: columns g, g+1 (rows 8k..8k+7); b[g + k + 2]: g+2, g+3
    for (int k = 0; k < 2; ++k) {
      b[g + k] = _mm_unpacklo_epi32(a[g + 2 * k], a[g + 2 * k + 1]);
      b[g + k + 2] = _mm_unpackhi_epi32(a[g + 2 * k], a[g + 2 * k + 1]);
    }
  for (int c = 0; c < 8; ++c) {  // column 2c, 2c + 1: all 16 rows
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * c * dst_stride), _mm_unpacklo_epi64(b[2 * c], b[2 * c + 1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * c + 1) * dst_stride),
                     _mm_unpackhi_epi64(b[2 * c], b[2 * c + 1]));
  }
}

// m a multiple of 16: blocks of 256 rows x 16 columns transposed through a 4 KiB stage, so each
// column's 256 bytes go out as whole cache lines (writing 16-byte pieces of 16 columns n bytes apart
// straight into `out` evicts lines half-written when n is a power of two: 4.5x slower at n = 32K).
// Returns the rows done.
int64_t tile_columns(const uint8_t* codes, int64_t n, int64_t m, uint8_t* out) {
  constexpr int64_t kRows = 256;
  alignas(64) uint8_t stage[16 * kRows];
  int64_t i = 0;
  for (; i + kRows <= n; i += kRows)
    for (int64_t j = 0; j < m; j += 16) {
      for (int64_t t = 0; t < kRows; t += 16) transpose_16x16(codes + (i + t) * m + j, m, stage + t, kRows);
      for (int64_t c = 0; c < 16; ++c) std::memcpy(out + (j + c) * n + i, stage + c * kRows, kRows);
    }
  return i;
}
#endif

}  // namespace

void codes_to_column_major(const uint8_t* codes, int64_t n, int64_t m, uint8_t* out) {
  int64_t done = 0;
#if KVTOOL_SSE2
  if (m == 2)
    done = split_columns<2>(codes, n, out);
  else if (m == 4)
    done = split_columns<4>(codes, n, out);
  else if (m == 8)
    done = split_columns<8>(codes, n, out);
  else if (m % 16 == 0)
    done = tile_columns(codes, n, m, out);
#endif
  codes_to_column_major_rows(codes, n, m, done, out);
}

}  // namespace kvtool::scoring
