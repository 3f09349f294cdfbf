#include "kvtool/scoring.h"

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

// Run-time dispatch to AVX2 / AVX-512 needs GCC or Clang on x86-64 (target attributes and
// __builtin_cpu_supports); elsewhere only the portable loops are built.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KVTOOL_X86_DISPATCH 1
#include <immintrin.h>
#else
#define KVTOOL_X86_DISPATCH 0
#endif
// SSE2 is in every x86-64 CPU: the codes' layout change (codes_to_column_major) needs no dispatch.
#if defined(__SSE2__) && !defined(__CUDACC__)
#define KVTOOL_SSE2 1
#include <emmintrin.h>
#else
#define KVTOOL_SSE2 0
#endif

namespace kvtool::scoring {

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

std::atomic<int> g_simd_cap{static_cast<int>(Simd::avx512)};

// Rows [from, to) of n (codes[j * n + i]).
template <typename Code>
void cm_portable(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k, float* score, int64_t from,
                 int64_t to) {
  for (int64_t i = from; i < to; ++i) score[i] = 0.f + lut[codes[i]];
  for (int64_t j = 1; j < m; ++j) {
    const float* t = lut + j * k;
    const Code* c = codes + j * n;
    for (int64_t i = from; i < to; ++i) score[i] += t[c[i]];
  }
}

// The rows of a group pass that stay in L1 while every query of the group reads them.
constexpr int64_t kGroupBlock = 1024;

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

#if KVTOOL_X86_DISPATCH
// GCC 12 warns inside its own AVX-512 headers (an intentionally undefined pass-through operand of
// the conversion and gather intrinsics): not a use of uninitialized data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <typename Code>
__attribute__((target("avx2"))) __m256i load8_idx(const Code* c) {
  if constexpr (sizeof(Code) == 1)
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  else
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
}

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

template <typename Code>
__attribute__((target("avx512f,avx512bw"))) __m512i load16_idx(const Code* c) {
  if constexpr (sizeof(Code) == 1)
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  else
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
}

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
#endif

template <typename Code>
void pq_scores_cm(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k, float* score) {
  if (n <= 0) return;
  if (m <= 0) {
    std::fill(score, score + n, 0.f);
    return;
  }
#if KVTOOL_X86_DISPATCH
  const Simd level = simd_level();
  if (level == Simd::avx512) return cm_avx512(lut, codes, n, m, k, score, 0, n);
  if (level == Simd::avx2) return cm_avx2(lut, codes, n, m, k, score, 0, n);
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
#if KVTOOL_X86_DISPATCH
  const Simd level = simd_level();
  // Tables of at most 64 entries fit registers (cm_avx512) for one query at a time: the blocked
  // loop below, which measured faster than the four queries' tables read from L1.
  if (level == Simd::avx512 && k > 64) {
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
    return;
  }
#endif
  // Blocks of rows, each scored for every query while its codes are in L1.
  for (int64_t b = 0; b < n; b += kGroupBlock) {
    const int64_t e = std::min(n, b + kGroupBlock);
    for (int64_t q = 0; q < g; ++q) {
#if KVTOOL_X86_DISPATCH
      if (level == Simd::avx512) {
        cm_avx512(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
        continue;
      }
      if (level == Simd::avx2) {
        cm_avx2(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
        continue;
      }
#endif
      cm_portable(luts + q * m * k, codes, n, m, k, scores + q * n, b, e);
    }
  }
}

}  // namespace

Simd simd_supported() {
#if KVTOOL_X86_DISPATCH
  static const Simd s = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return Simd::avx512;
    if (__builtin_cpu_supports("avx2")) return Simd::avx2;
    return Simd::portable;
  }();
  return s;
#else
  return Simd::portable;
#endif
}

Simd simd_level() {
  return static_cast<Simd>(std::min(static_cast<int>(simd_supported()), g_simd_cap.load(std::memory_order_relaxed)));
}

Simd set_simd_level(Simd cap) {
  g_simd_cap.store(static_cast<int>(cap), std::memory_order_relaxed);
  return simd_level();
}

const char* simd_name(Simd s) {
  switch (s) {
    case Simd::avx512:
      return "avx512";
    case Simd::avx2:
      return "avx2";
    default:
      return "portable";
  }
}

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
#if KVTOOL_X86_DISPATCH
  if (simd_level() == Simd::avx512) return lut_t_avx512(q, centroids_t, m, k, dsub, lut);
#endif
  lut_t_portable(q, centroids_t, m, k, dsub, lut, 0);
}
void pq_scores_cm_u16(const float* lut, const uint16_t* codes, int64_t n, int64_t m, int64_t k, float* score) {
  pq_scores_cm(lut, codes, n, m, k, score);
}

namespace {

// A key whose ascending order is the selection order (score descending, then id ascending): the
// float's bits mapped to an unsigned value of the same order (negatives flipped, -0 folded into
// +0 since they compare equal), complemented so that larger scores come first, with the id in the
// low half. Sorting plain integers avoids the indirect comparator's cache misses.
// Branch-free (a score's sign is a coin flip a branch predictor loses half the time): -0 + 0 is
// +0 in IEEE round-to-nearest, and the mask flips every bit of a negative float but only the
// sign bit of a positive one.
uint64_t selection_key(float s, int64_t id) {
  s = s + 0.0f;
  uint32_t b;
  std::memcpy(&b, &s, sizeof b);
  b ^= static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u;
  return (static_cast<uint64_t>(~b) << 32) | static_cast<uint32_t>(id);
}

// Per-thread buffers reused from call to call: a query allocates (and page-faults) nothing once
// its thread has seen the largest n. Grown, never value-initialized again (every slot is written
// before it is read).
constexpr int64_t kSampleBuckets = 2048;
constexpr int kDigitBits = 11;  // sort_by_score_key's widest digit

struct SelectionScratch {
  // low/tied per recursion depth: each level narrows the key range 2^11-fold (or ends), so 64-bit
  // keys need at most 6 levels.
  std::vector<uint64_t> keys, sorted, low[8], tied[8];
  std::array<uint32_t, 3 << kDigitBits> hist;  // sample_bound; sort_by_score_key: at most 3 x 2^11 (widest 11)
};
uint64_t* room(std::vector<uint64_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
SelectionScratch& selection_scratch() {
  thread_local SelectionScratch s;
  return s;
}

// Moves the b smallest of keys[0, n) (distinct) to the front, in any order, 0 < b < n: a
// histogram over the keys' actual range finds the bucket t that holds the b-th smallest; the
// keys of lower buckets are kept, and the selection recurses into bucket t's keys alone (its range
// is 2^11 times narrower, or it holds fewer keys). Scores crowd into few buckets of a histogram
// over the whole range (float bits are logarithmic), so one level can leave thousands tied. A
// plain nth_element over all n was most of eval's selector time at 32K rows
// (lib/offline/src/eval.cpp queries every row's receipt).
void extremes(const uint64_t* keys, int64_t n, uint64_t& lo, uint64_t& hi) {
  lo = UINT64_MAX;
  hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, keys[i]);
    hi = std::max(hi, keys[i]);
  }
}

// keys[0, n) lie in [lo, hi].
// `cap` (the top level's n) sizes every level's buffers, so that a thread's scratch stops growing
// once it has selected from that many keys, whatever the keys' distribution.
void select_smallest(uint64_t* keys, int64_t n, int64_t b, uint64_t lo, uint64_t hi, SelectionScratch& sc, int64_t cap,
                     int depth = 0) {
  constexpr uint64_t kBuckets = 2048;
  int shift = 0;
  while (((hi - lo) >> shift) >= kBuckets) ++shift;
  std::array<int64_t, kBuckets> count{};
  for (int64_t i = 0; i < n; ++i) ++count[(keys[i] - lo) >> shift];
  int64_t below = 0;
  uint64_t t = 0;
  while (below + count[t] < b) below += count[t++];
  // Branch-free compaction: the keys of the buckets below t, then bucket t's (each store lands
  // in a slot that is either kept or overwritten by the next key of that kind).
  uint64_t* low = room(sc.low[depth], static_cast<size_t>(cap) + 1);
  uint64_t* tied = room(sc.tied[depth], static_cast<size_t>(cap) + 1);
  size_t w = 0, e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = keys[i], bucket = (k - lo) >> shift;
    low[w] = k;
    w += bucket < t;
    tied[e] = k;
    e += bucket == t;
  }
  const int64_t need = b - below;
  if (need < static_cast<int64_t>(e) && e > 64 && shift > 0 && depth + 1 < 8) {
    extremes(tied, static_cast<int64_t>(e), lo, hi);
    select_smallest(tied, static_cast<int64_t>(e), need, lo, hi, sc, cap, depth + 1);
  } else if (need < static_cast<int64_t>(e))
    std::nth_element(tied, tied + need, tied + e);
  std::copy(tied, tied + need, keys + w);
  std::copy(low, low + w, keys);
}

// Sorts keys[0, n) ascending by their bits [from, 64): LSD radix sort by 11-bit digits (stable:
// keys equal in those bits keep their order), skipping the digits in which all keys agree (a
// selection's keys share most of their high bits). `tmp` holds n keys.
void radix_sort(uint64_t* keys, int64_t n, uint64_t* tmp, int from = 0) {
  if (n < 2) return;
  uint64_t any = 0, all = ~uint64_t{0};
  for (int64_t i = 0; i < n; ++i) any |= keys[i], all &= keys[i];
  const uint64_t varying = any ^ all;
  uint64_t *src = keys, *dst = tmp;
  for (int shift = from; shift < 64; shift += 11) {
    if (((varying >> shift) & 0x7ff) == 0) continue;
    std::array<int64_t, 2048> pos{};
    for (int64_t i = 0; i < n; ++i) ++pos[(src[i] >> shift) & 0x7ff];
    int64_t sum = 0;
    for (auto& p : pos) {
      const int64_t c = p;
      p = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; ++i) dst[pos[(src[i] >> shift) & 0x7ff]++] = src[i];
    std::swap(src, dst);
  }
  if (src != keys) std::copy(src, src + n, keys);
}

// The selection key's high half alone: ascending order = score descending (see selection_key).
uint32_t score_key(float s) { return static_cast<uint32_t>(selection_key(s, 0) >> 32); }

// Every i in [0, n) whose score_key is <= t, as (key << 32 | i) in ascending i; returns the count.
// out holds n + 16 keys.
int64_t collect_at_most(const float* score, int64_t n, uint32_t t, uint64_t* out, int64_t from = 0) {
  int64_t w = 0;
  for (int64_t i = from; i < n; ++i) {
    const uint32_t key = score_key(score[i]);
    out[w] = (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(i);
    w += key <= t;
  }
  return w;
}

#if KVTOOL_X86_DISPATCH
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
#endif

// An upper bound t on the key of sample rank `rank` (0-based): the top edge of the bucket of the
// sample's key range that holds that rank, so at least rank + 1 sample keys are <= t. Buckets
// instead of nth_element, whose data-dependent branches cost more than the rest of the selection;
// t only sets how many rows the exact pass keeps, never the answer.
uint32_t sample_bound(const uint32_t* sample, int64_t count, int64_t rank, uint32_t* hist) {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (int64_t j = 0; j < count; ++j) lo = std::min(lo, sample[j]), hi = std::max(hi, sample[j]);
  int shift = 0;
  while (((hi - lo) >> shift) >= kSampleBuckets) ++shift;
  std::fill(hist, hist + kSampleBuckets, 0u);
  for (int64_t j = 0; j < count; ++j) ++hist[(sample[j] - lo) >> shift];
  int64_t seen = 0, bucket = 0;
  while ((seen += hist[bucket]) <= rank) ++bucket;
  const uint64_t top = uint64_t{lo} + ((static_cast<uint64_t>(bucket) + 1) << shift) - 1;
  return static_cast<uint32_t>(std::min<uint64_t>(top, hi));
}

// One LSD pass of sort_by_score_key: keys from src to dst by the digit at `shift` of their score
// key's offset from lo, at the positions `pos` (the digit's exclusive prefix sums, advanced as keys
// land).
void scatter_by_digit(const uint64_t* src, uint64_t* dst, int64_t w, uint32_t lo, int shift, uint32_t mask,
                      uint32_t* pos) {
  for (int64_t i = 0; i < w; ++i) dst[pos[((static_cast<uint32_t>(src[i] >> 32) - lo) >> shift) & mask]++] = src[i];
}

// Sorts w keys (score key << 32 | id), which arrive in ascending id order, by the score key alone:
// stable, so that is the full order. An LSD radix sort of the score key's offset from the
// smallest, in as few passes as the offsets' range needs with digits of at most 11 bits and of
// about log2(w) bits (the top tenth of 32K PQ scores spans 23-25 bits: three passes of 8-9 bits),
// so that the buckets' bookkeeping stays below the keys' count: a few hundred kept code pairs
// spent most of their sort clearing and summing 4,096 buckets. Every pass's histogram is counted
// in one read. Returns keys or tmp (w keys), whichever holds the sorted keys.
uint64_t* sort_by_score_key(uint64_t* keys, int64_t w, uint64_t* tmp, uint32_t* hist) {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (int64_t i = 0; i < w; ++i) {
    const auto k = static_cast<uint32_t>(keys[i] >> 32);
    lo = std::min(lo, k), hi = std::max(hi, k);
  }
  if (w < 2 || hi == lo) return keys;
  const int bits = 32 - std::countl_zero(hi - lo);
  const int widest = std::clamp(63 - std::countl_zero(static_cast<uint64_t>(w)), 4, kDigitBits);
  const int passes = (bits + widest - 1) / widest, digit = (bits + passes - 1) / passes;
  const uint32_t mask = (1u << digit) - 1, buckets = mask + 1;
  std::fill(hist, hist + passes * buckets, 0u);
  for (int64_t i = 0; i < w; ++i) {
    const uint32_t d = static_cast<uint32_t>(keys[i] >> 32) - lo;
    for (int p = 0; p < passes; ++p) ++hist[p * buckets + ((d >> (p * digit)) & mask)];
  }
  uint64_t *src = keys, *dst = tmp;
  for (int p = 0; p < passes; ++p) {
    uint32_t* pos = hist + p * buckets;
    uint32_t sum = 0;
    for (uint32_t k = 0; k < buckets; ++k) sum += std::exchange(pos[k], sum);
    scatter_by_digit(src, dst, w, lo, p * digit, mask, pos);
    std::swap(src, dst);
  }
  return src;
}

// The b smallest of those w keys ascending into order's ids.
void sort_kept(uint64_t* keys, int64_t w, int64_t b, uint64_t* tmp, uint32_t* hist, int64_t* order) {
  const uint64_t* sorted = sort_by_score_key(keys, w, tmp, hist);
  for (int64_t i = 0; i < b; ++i) order[i] = static_cast<int64_t>(sorted[i] & 0xffffffffu);
}

// The rank in a strided sample of kSelectionSample keys whose key bounds the b-th smallest of n
// from above with a margin of 4 binomial standard deviations (plus 4); -1 when that rank is not
// below the sample's last, so the sample cannot bound it.
int64_t sample_rank(int64_t b, int64_t n) {
  const double p = static_cast<double>(b) / static_cast<double>(n);
  const int64_t expect = static_cast<int64_t>(p * kSelectionSample);
  const int64_t rank = expect + static_cast<int64_t>(4 * std::sqrt(kSelectionSample * p * (1 - p))) + 4;
  return rank >= kSelectionSample - 1 ? -1 : rank;
}

// collect_at_most at the Simd level in use.
int64_t collect(const float* score, int64_t n, uint32_t t, uint64_t* out) {
#if KVTOOL_X86_DISPATCH
  if (simd_level() == Simd::avx512) return collect_at_most_avx512(score, n, t, out);
#endif
  return collect_at_most(score, n, t, out);
}

// The selection when b is well below n: a strided sample of the keys bounds the b-th smallest
// from above with a margin of 4 binomial standard deviations (plus 4), one pass keeps every key
// at most that bound (in id order), and a sort of the kept keys gives the answer: every key left
// out is larger than every key kept, so when at least b are kept their first b are exactly the b
// best. Returns false (nothing written) when the sample missed, i.e. fewer than b were kept; the
// caller then runs the full selection. The sample changes the speed, never the answer.
bool top_k_sampled(const float* score, int64_t n, int64_t b, int64_t* order, SelectionScratch& sc) {
  const int64_t rank = sample_rank(b, n);
  if (rank < 0) return false;
  uint32_t sample[kSelectionSample];
  for (int64_t j = 0; j < kSelectionSample; ++j) sample[j] = score_key(score[j * n / kSelectionSample]);
  const uint32_t t = sample_bound(sample, kSelectionSample, rank, sc.hist.data());
  uint64_t* kept = room(sc.keys, static_cast<size_t>(n) + 16);
  const int64_t w = collect(score, n, t, kept);
  if (w < b) return false;
  sort_kept(kept, w, b, room(sc.sorted, static_cast<size_t>(n)), sc.hist.data(), order);  // sized by n: no regrowth
  return true;
}

// Groups of rows (RowGroups) scored score[p]: the groups that hold the b best rows, perhaps with
// more, as (score key << 32 | group) in increasing group order; returns their count. The sample of
// the rows (stratified by group) bounds the cut as top_k_sampled's does; when the groups within
// the bound hold fewer than b rows, every group is returned. Either way every row left out scores
// below every row kept, so the answer never depends on the sample.
int64_t collect_groups(const float* score, const RowGroups& g, int64_t b, uint64_t* kept, SelectionScratch& sc) {
  const int64_t groups = g.groups();
  const int64_t rank = g.n >= 8192 && b <= g.n / 4 && !g.sample.empty() ? sample_rank(b, g.n) : -1;
  if (rank >= 0) {
    uint32_t sample[kSelectionSample];
    for (int64_t j = 0; j < kSelectionSample; ++j) sample[j] = score_key(score[g.sample[j]]);
    const int64_t w = collect(score, groups, sample_bound(sample, kSelectionSample, rank, sc.hist.data()), kept);
    int64_t rows = 0;
    for (int64_t i = 0; i < w; ++i) {
      const uint32_t p = static_cast<uint32_t>(kept[i]);
      rows += g.start[p + 1] - g.start[p];
    }
    if (rows >= b) return w;
  }
  return collect(score, groups, UINT32_MAX, kept);
}

// The first `take` of `rows` at ids with score s at scores (nullptr: none). `most` >= take is the
// room at ids / scores and `readable` how many rows may be read: eight at a time while eight fit
// both, so entries past the group's may be written (the next group's rows overwrite them) — short
// lists copied without a branch on their length, which mispredicted on about every group.
template <typename Row>
void emit_rows(const Row* rows, int64_t take, int64_t most, int64_t readable, float s, int64_t base, int64_t* ids,
               float* scores) {
  int64_t r = 0;
  for (; r < take && r + 8 <= most && r + 8 <= readable; r += 8)
    for (int64_t e = r; e < r + 8; ++e) {
      ids[e] = base + rows[e];
      if (scores) scores[e] = s;
    }
  for (; r < take; ++r) {
    ids[r] = base + rows[r];
    if (scores) scores[r] = s;
  }
}

// The first min(most, its size) rows of group p (ascending) at ids / scores, which have room for
// `most`; returns how many.
int64_t emit_group(const float* score, const RowGroups& g, uint32_t p, int64_t most, int64_t base, int64_t* ids,
                   float* scores) {
  const int64_t take = std::min<int64_t>(most, g.start[p + 1] - g.start[p]);
  const int64_t readable = g.n - g.start[p];  // rows past the group's are read too
  if (g.rows16.empty())
    emit_rows(g.rows32.data() + g.start[p], take, most, readable, score[p], base, ids, scores);
  else
    emit_rows(g.rows16.data() + g.start[p], take, most, readable, score[p], base, ids, scores);
  return take;
}

// The groups of keys[0, count), which all score equal: their rows merged in increasing order (as
// (row << 32 | group), radix-sorted by row), the first `most` of them at ids / scores.
int64_t emit_tied(const float* score, const RowGroups& g, const uint64_t* keys, int64_t count, int64_t most,
                  int64_t base, int64_t* ids, float* scores, SelectionScratch& sc) {
  uint64_t* merged = room(sc.tied[0], static_cast<size_t>(g.n));
  int64_t total = 0;
  for (int64_t c = 0; c < count; ++c) {
    const uint32_t p = static_cast<uint32_t>(keys[c]);
    for (uint32_t r = g.start[p]; r < g.start[p + 1]; ++r) merged[total++] = (uint64_t{g.row(r)} << 32) | p;
  }
  radix_sort(merged, total, room(sc.low[0], static_cast<size_t>(g.n)), 32);
  const int64_t take = std::min(most, total);
  for (int64_t r = 0; r < take; ++r) {
    ids[r] = base + static_cast<int64_t>(merged[r] >> 32);
    if (scores) scores[r] = score[static_cast<uint32_t>(merged[r])];
  }
  return take;
}

}  // namespace

std::vector<int64_t> top_k(const float* score, int64_t n, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(0, std::min(k, n))));
  top_k_into(score, n, k, order.data());
  return order;
}

int64_t top_k_into(const float* score, int64_t n, int64_t k, int64_t* order) {
  const int64_t b = std::max<int64_t>(0, std::min(k, n));
  if (n > int64_t{UINT32_MAX}) {  // ids do not fit the key's low half: the comparator path
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    auto better = [&](int64_t a, int64_t c) { return score[a] > score[c] || (score[a] == score[c] && a < c); };
    std::partial_sort(all.begin(), all.begin() + b, all.end(), better);
    std::copy(all.begin(), all.begin() + b, order);
    return b;
  }
  SelectionScratch& sc = selection_scratch();
  if (b > 0 && n >= 8192 && b <= n / 4 && top_k_sampled(score, n, b, order, sc)) return b;
  uint64_t* keys = room(sc.keys, static_cast<size_t>(n));
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = selection_key(score[i], i);
    lo = std::min(lo, keys[i]);
    hi = std::max(hi, keys[i]);
  }
  // Select, then sort the b kept: O(n + b), where a heap of size b is O(n log b). The order is
  // total, so the answer is the same sequence as a full sort's first b.
  if (b > 0 && b < n) select_smallest(keys, n, b, lo, hi, sc, n);
  radix_sort(keys, b, room(sc.sorted, static_cast<size_t>(n)));
  for (int64_t i = 0; i < b; ++i) order[i] = static_cast<int64_t>(keys[i] & 0xffffffffu);
  return b;
}

int64_t top_k_few_into(const float* score, int64_t n, int64_t k, int64_t* order) {
  const int64_t b = std::max<int64_t>(0, std::min(k, n));
  if (b == 0 || n > int64_t{UINT32_MAX}) return top_k_into(score, n, k, order);
  // Keys in index order: the stable LSD sort by the score bits alone leaves equal scores by index.
  // (A most-significant-digit pass with per-bucket sorts was slower: candidate scores of both
  // signs span most of the key range, so a few buckets hold nearly every key.)
  SelectionScratch& sc = selection_scratch();
  uint64_t* keys = room(sc.keys, static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keys[i] = selection_key(score[i], i);
  sort_kept(keys, n, b, room(sc.sorted, static_cast<size_t>(n)), sc.hist.data(), order);
  return b;
}

std::vector<int64_t> rank_all(const float* score, int64_t n) { return top_k(score, n, n); }

void RowGroups::prefetch() const {
  auto sweep = [](const void* data, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(data) + o, 0, 3);
  };
  sweep(start.data(), start.size() * sizeof(uint32_t));
  sweep(rows16.data(), rows16.size() * sizeof(uint16_t));
  sweep(rows32.data(), rows32.size() * sizeof(uint32_t));
}

int64_t RowGroups::bytes() const {
  return static_cast<int64_t>((start.capacity() + rows32.capacity() + sample.capacity()) * sizeof(uint32_t) +
                              rows16.capacity() * sizeof(uint16_t));
}

void group_rows(const uint32_t* key, int64_t n, int64_t key_count, RowGroups& out, std::vector<uint32_t>& keys) {
  std::vector<uint32_t> group(static_cast<size_t>(key_count), 0);  // first a count per key
  for (int64_t i = 0; i < n; ++i) ++group[key[i]];
  const auto groups = static_cast<size_t>(std::count_if(group.begin(), group.end(), [](uint32_t c) { return c > 0; }));
  keys.resize(groups);
  out.n = n;
  out.start.assign(groups + 1, 0);  // exact sizes: bytes() counts capacity
  size_t p = 0;
  for (int64_t v = 0; v < key_count; ++v) {
    if (group[v] == 0) continue;
    keys[p] = static_cast<uint32_t>(v);
    out.start[p + 1] = out.start[p] + group[v];
    group[v] = static_cast<uint32_t>(p++);  // now the key's group
  }
  std::vector<uint32_t> next(out.start.begin(), out.start.end() - 1);
  auto place = [&](auto& rows) {
    rows.resize(static_cast<size_t>(n));
    using Row = typename std::decay_t<decltype(rows)>::value_type;
    for (int64_t i = 0; i < n; ++i) rows[next[group[key[i]]]++] = static_cast<Row>(i);
  };
  out.rows16.clear();
  out.rows32.clear();
  if (n <= RowGroups::kRows16)
    place(out.rows16);
  else
    place(out.rows32);
  out.sample.clear();
  if (n < kSelectionSample) return;
  out.sample.resize(kSelectionSample);
  p = 0;  // positions j * n / kSelectionSample increase with j, and so do their groups
  for (int64_t j = 0; j < kSelectionSample; ++j) {
    const int64_t at = j * n / kSelectionSample;
    while (out.start[p + 1] <= at) ++p;
    out.sample[j] = static_cast<uint32_t>(p);
  }
}

int64_t top_k_groups_into(const float* score, const RowGroups& g, int64_t k, int64_t base, int64_t* ids,
                          float* scores) {
  const int64_t b = std::max<int64_t>(0, std::min(k, g.n));
  if (b == 0) return 0;
  SelectionScratch& sc = selection_scratch();
  const auto groups = static_cast<size_t>(g.groups());
  uint64_t* kept = room(sc.keys, groups + 16);
  const int64_t w = collect_groups(score, g, b, kept, sc);
  const uint64_t* sorted = sort_by_score_key(kept, w, room(sc.sorted, groups), sc.hist.data());
  int64_t out = 0;
  for (int64_t i = 0; i < w && out < b;) {  // runs of equal score keys: one group, or tied groups merged
    int64_t j = i + 1;
    while (j < w && (sorted[j] >> 32) == (sorted[i] >> 32)) ++j;
    float* at = scores ? scores + out : nullptr;
    if (j == i + 1) {
      out += emit_group(score, g, static_cast<uint32_t>(sorted[i]), b - out, base, ids + out, at);
    } else {
      uint64_t* run = room(sc.tied[1], static_cast<size_t>(j - i));
      for (int64_t r = i; r < j; ++r) run[r - i] = static_cast<uint32_t>(sorted[r]);
      out += emit_tied(score, g, run, j - i, b - out, base, ids + out, at, sc);
    }
    i = j;
  }
  return out;
}

void dot_scores(const float* q, const float* centroids, int64_t count, int64_t d, float* out) {
  for (int64_t c = 0; c < count; ++c) {
    float s = 0;
    for (int64_t t = 0; t < d; ++t) s += q[t] * centroids[c * d + t];
    out[c] = s;
  }
}

void dot_scores_f64(const float* q, const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                    double* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float* cen = centroids + (rows ? rows[i] : i) * d;
    double z = 0;
    for (int64_t t = 0; t < d; ++t) z += static_cast<double>(q[t]) * cen[t];
    out[i] = z * scale;
  }
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

#if KVTOOL_X86_DISPATCH
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

// Six rows at a time (24 accumulators): each w vector loaded serves six rows.
__attribute__((target("avx512f"))) void simhash_products_avx512(const float* x, int64_t rows, int64_t d, const float* w,
                                                                int64_t cols, float* out) {
  int64_t i = 0;
  for (; i + 6 <= rows; i += 6) products_rows_avx512<6>(x + i * d, d, w, cols, out + i * cols);
  for (; i < rows; ++i) products_rows_avx512<1>(x + i * d, d, w, cols, out + i * cols);
}

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
#endif

}  // namespace

void simhash_products(const float* x, int64_t rows, int64_t d, const float* w, int64_t cols, float* out) {
#if KVTOOL_X86_DISPATCH
  const Simd level = simd_level();
  if (level == Simd::avx512) return simhash_products_avx512(x, rows, d, w, cols, out);
  if (level == Simd::avx2) return simhash_products_avx2(x, rows, d, w, cols, out);
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
