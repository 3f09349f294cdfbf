// The AVX-512 kernels of the query arithmetic (scoring_kernels.h): sixteen lanes, the same bits as
// the portable loops. Only called where simd_level() is avx512, so a CPU without AVX-512 F+BW never
// meets them.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "scoring_kernels.h"
#include "selection_internal.h"

#if KVTOOL_X86_TARGETS

namespace kvtool::scoring::detail {

// GCC 12 warns inside its own AVX-512 headers (an intentionally undefined pass-through operand of
// the conversion and gather intrinsics): not a use of uninitialized data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

template <typename Code>
__attribute__((target("avx512f,avx512bw"))) __m512i load16_idx(const Code* c) {
  if constexpr (sizeof(Code) == 1)
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  else
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
}

}  // namespace

// AVX-512: sixteen rows per lookup. Tables of at most 64 entries (b <= 6, the default) live in
// four registers and are read with two-register permutes (no memory gather); larger ones gather.
// Rows [from, to) of n.
template <typename Code>
__attribute__((target("avx512f,avx512bw"))) void cm_avx512(const float* lut, const Code* codes, int64_t n, int64_t m,
                                                           int64_t k, float* score, int64_t from, int64_t to) {
  const int64_t end16 = from + (to - from) / 16 * 16;
  alignas(64) float pad[64];
  for (int64_t j = 0; j < m; ++j) {
    const float* t = lut + j * k;
    const Code* c = codes + j * n;
    if (k <= 64) {
      for (int64_t e = 0; e < 64; ++e) pad[e] = e < k ? t[e] : 0.f;  // codes are < k: padding is never read
      const __m512 t0 = _mm512_load_ps(pad), t1 = _mm512_load_ps(pad + 16), t2 = _mm512_load_ps(pad + 32),
                   t3 = _mm512_load_ps(pad + 48);
      const __m512i bit5 = _mm512_set1_epi32(32);
      for (int64_t i = from; i < end16; i += 16) {
        const __m512i idx = load16_idx(c + i);
        const __m512 lo = _mm512_permutex2var_ps(t0, idx, t1), hi = _mm512_permutex2var_ps(t2, idx, t3);
        const __m512 v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit5), lo, hi);
        const __m512 acc = j == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(score + i);
        _mm512_storeu_ps(score + i, _mm512_add_ps(acc, v));
      }
    } else {
      for (int64_t i = from; i < end16; i += 16) {
        const __m512 v = _mm512_i32gather_ps(load16_idx(c + i), t, 4);
        const __m512 acc = j == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(score + i);
        _mm512_storeu_ps(score + i, _mm512_add_ps(acc, v));
      }
    }
  }
  cm_portable(lut, codes, n, m, k, score, end16, to);
}

template void cm_avx512<uint8_t>(const float*, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
template void cm_avx512<uint16_t>(const float*, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);

namespace {

// Sixteen entries of the table `t` (padded to 64 or 128 floats, 64-byte aligned) at the lanes'
// codes: two-register permutes over each 32 entries, blended by the codes' bits 5 and 6. The
// tables are read from memory (L1) since a group's tables outnumber the registers.
template <int Kpad>
__attribute__((target("avx512f,avx512bw"))) __m512 lookup_pad(const float* t, __m512i idx, __mmask16 b5, __mmask16 b6) {
  const __m512 lo = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(_mm512_load_ps(t), idx, _mm512_load_ps(t + 16)),
                                         _mm512_permutex2var_ps(_mm512_load_ps(t + 32), idx, _mm512_load_ps(t + 48)));
  if constexpr (Kpad == 64) {
    (void)b6;
    return lo;
  } else {
    const __m512 hi =
        _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(_mm512_load_ps(t + 64), idx, _mm512_load_ps(t + 80)),
                             _mm512_permutex2var_ps(_mm512_load_ps(t + 96), idx, _mm512_load_ps(t + 112)));
    return _mm512_mask_blend_ps(b6, lo, hi);
  }
}

// G queries' scores of sixteen rows at a time, each subspace's codes loaded once for all G:
// score = ((0 + t_0[c_0]) + t_1[c_1]) + ..., the subspaces added in the row-major loop's order
// (two per visit to the scores, so m = 2 writes each score once). Kpad 64/128: padded tables
// `pad` [G, m, Kpad] read by permutes; Kpad 0: gathers from `luts` [G, m, k].
template <int G, int Kpad, typename Code>
__attribute__((target("avx512f,avx512bw"))) void cm_group_avx512(const float* luts, const float* pad, const Code* codes,
                                                                 int64_t n, int64_t m, int64_t k, float* scores) {
  const int64_t n16 = n / 16 * 16;
  const __m512i bit5 = _mm512_set1_epi32(32), bit6 = _mm512_set1_epi32(64);
  for (int64_t j = 0; j < m; j += 2) {
    const bool pair = j + 1 < m;
    for (int64_t i = 0; i < n16; i += 16) {
      const __m512i i0 = load16_idx<Code>(codes + j * n + i);
      const __m512i i1 = pair ? load16_idx<Code>(codes + (j + 1) * n + i) : i0;
      const __mmask16 a5 = _mm512_test_epi32_mask(i0, bit5), a6 = _mm512_test_epi32_mask(i0, bit6);
      const __mmask16 b5 = _mm512_test_epi32_mask(i1, bit5), b6 = _mm512_test_epi32_mask(i1, bit6);
      for (int g = 0; g < G; ++g) {
        float* sc = scores + g * n + i;
        __m512 acc = j == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(sc);
        if constexpr (Kpad > 0) {
          const float* t = pad + (g * m + j) * Kpad;
          acc = _mm512_add_ps(acc, lookup_pad<Kpad>(t, i0, a5, a6));
          if (pair) acc = _mm512_add_ps(acc, lookup_pad<Kpad>(t + Kpad, i1, b5, b6));
        } else {
          const float* t = luts + (g * m + j) * k;
          acc = _mm512_add_ps(acc, _mm512_i32gather_ps(i0, t, 4));
          if (pair) acc = _mm512_add_ps(acc, _mm512_i32gather_ps(i1, t + k, 4));
        }
        _mm512_storeu_ps(sc, acc);
      }
    }
  }
  for (int g = 0; g < G; ++g) cm_portable(luts + g * m * k, codes, n, m, k, scores + g * n, n16, n);
}

template <int G, typename Code>
__attribute__((target("avx512f,avx512bw"))) void cm_group_avx512(const float* luts, const Code* codes, int64_t n,
                                                                 int64_t m, int64_t k, float* scores) {
  if (k > 128) return cm_group_avx512<G, 0>(luts, nullptr, codes, n, m, k, scores);
  const int64_t kpad = k <= 64 ? 64 : 128;
  thread_local std::vector<float> pad_buf;  // grown, never shrunk: warm threads allocate nothing
  if (pad_buf.size() < static_cast<size_t>(G * m * kpad + 16)) pad_buf.resize(static_cast<size_t>(G * m * kpad + 16));
  float* pad = pad_buf.data() + (16 - reinterpret_cast<uintptr_t>(pad_buf.data()) / 4 % 16) % 16;  // 64-byte aligned
  for (int64_t t = 0; t < G * m; ++t)
    for (int64_t e = 0; e < kpad; ++e) pad[t * kpad + e] = e < k ? luts[t * k + e] : 0.f;  // codes < k: never read
  if (kpad == 64) return cm_group_avx512<G, 64>(luts, pad, codes, n, m, k, scores);
  cm_group_avx512<G, 128>(luts, pad, codes, n, m, k, scores);
}

}  // namespace

template <typename Code>
void cm_groups_avx512(const float* luts, int64_t g, const Code* codes, int64_t n, int64_t m, int64_t k, float* scores) {
  for (int64_t q = 0; q < g; q += 4) {  // four at a time: their tables fit L1 beside the codes
    const float* l = luts + q * m * k;
    float* s = scores + q * n;
    switch (std::min<int64_t>(4, g - q)) {
      case 1:
        cm_group_avx512<1>(l, codes, n, m, k, s);
        break;
      case 2:
        cm_group_avx512<2>(l, codes, n, m, k, s);
        break;
      case 3:
        cm_group_avx512<3>(l, codes, n, m, k, s);
        break;
      default:
        cm_group_avx512<4>(l, codes, n, m, k, s);
    }
  }
}
template void cm_groups_avx512<uint8_t>(const float*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*);
template void cm_groups_avx512<uint16_t>(const float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*);

// The lookup tables sixteen entries at a time, four blocks of sixteen side by side (independent
// sums hide the adds' latency); each entry 0 + p_0 + p_1 + ... in float like pq_lut.
__attribute__((target("avx512f"))) void lut_t_avx512(const float* q, const float* ct, int64_t m, int64_t k,
                                                     int64_t dsub, float* lut) {
  const int64_t k64 = k / 64 * 64;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < k64; c += 64) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < dsub; ++t) {
        const __m512 qt = _mm512_set1_ps(q[j * dsub + t]);
        const float* row = ct + (j * dsub + t) * k + c;
        a0 = _mm512_add_ps(a0, _mm512_mul_ps(qt, _mm512_loadu_ps(row)));
        a1 = _mm512_add_ps(a1, _mm512_mul_ps(qt, _mm512_loadu_ps(row + 16)));
        a2 = _mm512_add_ps(a2, _mm512_mul_ps(qt, _mm512_loadu_ps(row + 32)));
        a3 = _mm512_add_ps(a3, _mm512_mul_ps(qt, _mm512_loadu_ps(row + 48)));
      }
      float* out = lut + j * k + c;
      _mm512_storeu_ps(out, a0);
      _mm512_storeu_ps(out + 16, a1);
      _mm512_storeu_ps(out + 32, a2);
      _mm512_storeu_ps(out + 48, a3);
    }
  if (k64 < k) lut_t_portable(q, ct, m, k, dsub, lut, k64);
}

// The same, sixteen scores at a time: keys computed as score_key does (+0.0f folds -0; the sign
// mask flips), lanes at most t compressed into place, widened to (key << 32 | i) eight at a time.
__attribute__((target("avx512f"))) int64_t collect_at_most_avx512(const float* score, int64_t n, uint32_t t,
                                                                  uint64_t* out) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)), ones = _mm512_set1_epi32(-1),
                tv = _mm512_set1_epi32(static_cast<int>(t)), step = _mm512_set1_epi32(16);
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t n16 = n / 16 * 16;
  int64_t w = 0;
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512i b = _mm512_castps_si512(_mm512_add_ps(_mm512_loadu_ps(score + i), _mm512_setzero_ps()));
    const __m512i key = _mm512_xor_si512(_mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi32(b, 31), sign)), ones);
    const __mmask16 keep = _mm512_cmple_epu32_mask(key, tv);
    if (keep) {
      const __m512i k = _mm512_maskz_compress_epi32(keep, key), id = _mm512_maskz_compress_epi32(keep, ids);
      // (key << 32 | id) for the 16 compressed lanes: interleave id (low) and key (high) halves.
      const __m512i lo = _mm512_unpacklo_epi32(id, k), hi = _mm512_unpackhi_epi32(id, k);
      // unpack works within 128-bit lanes: reorder so that element order is preserved.
      const __m512i first = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi);
      const __m512i second = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), hi);
      _mm512_storeu_si512(out + w, first);
      _mm512_storeu_si512(out + w + 8, second);
      w += __builtin_popcount(keep);
    }
    ids = _mm512_add_epi32(ids, step);
  }
  const int64_t rest = collect_at_most(score, n, t, out + w, n16);
  return w + rest;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {

// R rows x NV vectors of 16 columns from c0 held in registers for the whole sum over j; the last
// vector's columns masked by `last`. Inlined (with -fPIC GCC 12 otherwise keeps the accumulators
// on the stack: 2.3x slower).
template <int R, int NV>
__attribute__((target("avx512f"), always_inline)) inline void products_tile_avx512(const float* x, int64_t d,
                                                                                   const float* w, int64_t cols,
                                                                                   int64_t c0, __mmask16 last,
                                                                                   float* out) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < d; ++j) {
    __m512 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, w + j * cols + c0 + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * d + j]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(xr, wv[v]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(out + r * cols + c0 + 16 * v, v == NV - 1 ? last : 0xffff, acc[r][v]);
}

template <int R>
__attribute__((target("avx512f"))) void products_rows_avx512(const float* x, int64_t d, const float* w, int64_t cols,
                                                             float* out) {
  int64_t c0 = 0;
  for (; c0 + 64 <= cols; c0 += 64) products_tile_avx512<R, 4>(x, d, w, cols, c0, 0xffff, out);
  for (; c0 < cols; c0 += 16) {
    const int64_t left = std::min<int64_t>(16, cols - c0);
    products_tile_avx512<R, 1>(x, d, w, cols, c0, static_cast<__mmask16>((1u << left) - 1), out);
  }
}

}  // namespace

// Six rows at a time (24 accumulators): each w vector loaded serves six rows.
__attribute__((target("avx512f"))) void simhash_products_avx512(const float* x, int64_t rows, int64_t d, const float* w,
                                                                int64_t cols, float* out) {
  int64_t i = 0;
  for (; i + 6 <= rows; i += 6) products_rows_avx512<6>(x + i * d, d, w, cols, out + i * cols);
  for (; i < rows; ++i) products_rows_avx512<1>(x + i * d, d, w, cols, out + i * cols);
}

}  // namespace kvtool::scoring::detail

#endif
