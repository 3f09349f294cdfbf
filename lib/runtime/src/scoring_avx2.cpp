// The AVX2 kernels of the query arithmetic (scoring_kernels.h): eight lanes, the same bits as the
// portable loops. Only called where simd_level() is avx2, so a CPU without it never meets them.
#include <algorithm>
#include <array>
#include <cstdint>

#include "scoring_kernels.h"
#include "selection_internal.h"

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

// pq_lut_t's tables 32 entries at a time, each entry's sum over t in a register (mul then add, no
// FMA: the portable loop's roundings, in its order); the entries past the last 32 as it does.
__attribute__((target("avx2"))) void lut_t_avx2(const float* q, const float* ct, int64_t m, int64_t k, int64_t dsub,
                                                float* lut) {
  const int64_t k32 = k / 32 * 32;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < k32; c += 32) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < dsub; ++t) {
        const __m256 qt = _mm256_set1_ps(q[j * dsub + t]);
        const float* row = ct + (j * dsub + t) * k + c;
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(qt, _mm256_loadu_ps(row)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(qt, _mm256_loadu_ps(row + 8)));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(qt, _mm256_loadu_ps(row + 16)));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(qt, _mm256_loadu_ps(row + 24)));
      }
      float* out = lut + j * k + c;
      _mm256_storeu_ps(out, a0);
      _mm256_storeu_ps(out + 8, a1);
      _mm256_storeu_ps(out + 16, a2);
      _mm256_storeu_ps(out + 24, a3);
    }
  if (k32 < k) lut_t_portable(q, ct, m, k, dsub, lut, k32);
}

namespace {

// For each 8-bit mask of kept lanes, the kept lane numbers in order (then zeros): the permutation
// that moves them to the front of a vector (AVX2 has no compress instruction).
constexpr std::array<uint64_t, 256> kCompressLanes = [] {
  std::array<uint64_t, 256> t{};
  for (unsigned mask = 0; mask < 256; ++mask) {
    uint64_t lanes = 0;
    int at = 0;
    for (unsigned lane = 0; lane < 8; ++lane)
      if (mask >> lane & 1) lanes |= uint64_t{lane} << (8 * at++);
    t[mask] = lanes;
  }
  return t;
}();

}  // namespace

// collect_at_most eight scores at a time: keys as score_key computes them (+0.0f folds -0; the mask
// flips every bit of a negative float, the sign bit of a positive one; then the complement), the
// unsigned key <= t as a signed compare of both sides with their sign bits flipped, and the kept
// lanes moved to the front and widened to (key << 32 | i): the same keys in the same order as the
// scalar loop, without its store and add per score (a low budget keeps a few scores in a thousand).
__attribute__((target("avx2"))) int64_t collect_at_most_avx2(const float* score, int64_t n, uint32_t t, uint64_t* out) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u)), ones = _mm256_set1_epi32(-1),
                tv = _mm256_set1_epi32(static_cast<int>(t ^ 0x80000000u)), step = _mm256_set1_epi32(8);
  __m256i ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t n8 = n / 8 * 8;
  int64_t w = 0;
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256i b = _mm256_castps_si256(_mm256_add_ps(_mm256_loadu_ps(score + i), _mm256_setzero_ps()));
    const __m256i key = _mm256_xor_si256(_mm256_xor_si256(b, _mm256_or_si256(_mm256_srai_epi32(b, 31), sign)), ones);
    const __m256i above = _mm256_cmpgt_epi32(_mm256_xor_si256(key, sign), tv);
    const unsigned keep = ~static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(above))) & 0xffu;
    if (keep) {
      const __m256i lanes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(kCompressLanes[keep])));
      const __m256i k = _mm256_permutevar8x32_epi32(key, lanes), id = _mm256_permutevar8x32_epi32(ids, lanes);
      // (key << 32 | id): unpack interleaves within 128-bit halves, the cross-half permutes restore order.
      const __m256i lo = _mm256_unpacklo_epi32(id, k), hi = _mm256_unpackhi_epi32(id, k);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + w), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + w + 4), _mm256_permute2x128_si256(lo, hi, 0x31));
      w += __builtin_popcount(keep);
    }
    ids = _mm256_add_epi32(ids, step);
  }
  return w + collect_at_most(score, n, t, out + w, n8);
}

template void cm_avx2<uint8_t>(const float*, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
template void cm_avx2<uint16_t>(const float*, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {

// NR rows x 16 columns from c0 (two vectors), the sums over j in registers (fixed trip counts, so
// the compiler keeps the eight accumulators out of memory); mul then add, j from 0, as the
// portable loop.
template <int NR>
__attribute__((target("avx2"), always_inline)) inline void products_tile_avx2(const float* x, int64_t d, const float* w,
                                                                              int64_t cols, int64_t c0, float* out) {
  __m256 a0[NR], a1[NR];
  for (int r = 0; r < NR; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < d; ++j) {
    const __m256 w0 = _mm256_loadu_ps(w + j * cols + c0), w1 = _mm256_loadu_ps(w + j * cols + c0 + 8);
    for (int r = 0; r < NR; ++r) {
      const __m256 xr = _mm256_set1_ps(x[r * d + j]);
      a0[r] = _mm256_add_ps(a0[r], _mm256_mul_ps(xr, w0));
      a1[r] = _mm256_add_ps(a1[r], _mm256_mul_ps(xr, w1));
    }
  }
  for (int r = 0; r < NR; ++r) {
    _mm256_storeu_ps(out + r * cols + c0, a0[r]);
    _mm256_storeu_ps(out + r * cols + c0 + 8, a1[r]);
  }
}

// One row, 8 columns from c0 (the vector past the last pair of vectors).
__attribute__((target("avx2"))) void products_row8_avx2(const float* x, int64_t d, const float* w, int64_t cols,
                                                        int64_t c0, float* out) {
  __m256 a = _mm256_setzero_ps();
  for (int64_t j = 0; j < d; ++j)
    a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(x[j]), _mm256_loadu_ps(w + j * cols + c0)));
  _mm256_storeu_ps(out + c0, a);
}

}  // namespace

// AVX2: blocks of 64 rows (32 KiB of keys at d 128) against panels of 16 columns (8 KiB of the
// projections), so that both stay in cache while a block's 4 x 16 tiles are summed in registers;
// a row-major sweep of all columns per 4 rows read the whole projection matrix (768 KiB at
// 1,500 columns) from beyond L2 for every 4 keys. The columns past the last whole vector one at a
// time, as the portable loop sums them.
__attribute__((target("avx2"))) void simhash_products_avx2(const float* x, int64_t rows, int64_t d, const float* w,
                                                           int64_t cols, float* out) {
  constexpr int64_t kBlockRows = 64;
  const int64_t pair_cols = cols / 16 * 16, vec_cols = cols / 8 * 8;
  for (int64_t b0 = 0; b0 < rows; b0 += kBlockRows) {
    const int64_t b1 = std::min(rows, b0 + kBlockRows);
    for (int64_t c0 = 0; c0 < pair_cols; c0 += 16) {
      int64_t i = b0;
      for (; i + 4 <= b1; i += 4) products_tile_avx2<4>(x + i * d, d, w, cols, c0, out + i * cols);
      for (; i < b1; ++i) products_tile_avx2<1>(x + i * d, d, w, cols, c0, out + i * cols);
    }
    for (int64_t i = b0; i < b1; ++i) {
      if (pair_cols < vec_cols) products_row8_avx2(x + i * d, d, w, cols, pair_cols, out + i * cols);
      for (int64_t c = vec_cols; c < cols; ++c) {
        float sum = 0.f;
        for (int64_t j = 0; j < d; ++j) sum += x[i * d + j] * w[j * cols + c];
        out[i * cols + c] = sum;
      }
    }
  }
}

}  // namespace kvtool::scoring::detail

#endif
