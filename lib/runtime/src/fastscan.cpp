#include "kvtool/fastscan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "kvtool/cpu_features.h"
#include "kvtool/scoring.h"

// AVX2 / AVX-512 kernels need GCC or Clang on x86-64 (kvtool/cpu_features.h).
#if KVTOOL_X86_TARGETS
#include <immintrin.h>
#endif

namespace kvtool::scoring {

bool fastscan_applies(int64_t bits, int64_t m, int64_t n) {
  return bits == 4 && m >= 1 && m <= 256 && n >= 0 && n * ((m + 7) / 8 * 4) < (int64_t{1} << 31);
}

void fastscan_pack(const uint8_t* codes, int64_t n, int64_t m, FastScanCodes& out) {
  out.n = n;
  out.m = m;
  out.blocks = (n + 31) / 32;
  out.quads = (m + 3) / 4;
  out.row_bytes = (m + 7) / 8 * 4;
  out.scan.assign(static_cast<size_t>(out.blocks * out.quads * 64), 0);
  out.rows.assign(static_cast<size_t>(n * out.row_bytes), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % 32;
    uint8_t* blk = out.scan.data() + (i / 32) * out.quads * 64 + t % 16;
    uint8_t* row = out.rows.data() + i * out.row_bytes;
    for (int64_t j = 0; j < m; ++j) {
      const auto c = static_cast<uint8_t>(codes[i * m + j] & 15);
      blk[(j / 4) * 64 + (j % 4) * 16] |= static_cast<uint8_t>(t < 16 ? c : c << 4);
      row[j / 2] |= static_cast<uint8_t>(j % 2 ? c << 4 : c);
    }
  }
}

namespace {

// ---- 16-bit scores of every row from the quantized tables --------------------------------------

void scan_portable(const uint8_t* qlut, const FastScanCodes& c, uint16_t* out) {
  for (int64_t b = 0; b < c.blocks; ++b) {
    const uint8_t* blk = c.scan.data() + b * c.quads * 64;
    for (int64_t t = 0; t < 32; ++t) {
      uint32_t s = 0;
      for (int64_t j = 0; j < 4 * c.quads; ++j) {
        const uint8_t byte = blk[(j / 4) * 64 + (j % 4) * 16 + t % 16];
        s += qlut[j * 16 + (t < 16 ? byte & 15 : byte >> 4)];
      }
      out[b * 32 + t] = static_cast<uint16_t>(s);
    }
  }
}

#if KVTOOL_X86_TARGETS
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Words of even rows (e) and odd rows (o), rows 0..15 of the block: interleaved into row order.
__attribute__((target("avx2"))) void store_rows(__m128i e, __m128i o, uint16_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(e, o));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), _mm_unpackhi_epi16(e, o));
}

// The sum of a register's 128-bit lanes (its subspaces), as 16-bit words.
__attribute__((target("avx2"))) __m128i lane_sum256(__m256i a) {
  return _mm_add_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}
__attribute__((target("avx512f,avx512bw"))) __m128i lane_sum512(__m512i a) {
  return lane_sum256(_mm256_add_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1)));
}

// Per 128-bit lane (one subspace), byte t of a shuffle result is row t's table entry; as 16-bit
// words, the low bytes are the even rows and the high bytes the odd ones, summed apart (a0/a1:
// rows 0..15, a2/a3: rows 16..31) and the lanes (subspaces) added at the end of the block.
__attribute__((target("avx2"))) void scan_avx2(const uint8_t* qlut, const FastScanCodes& c, uint16_t* out) {
  const __m256i low4 = _mm256_set1_epi8(15), low8 = _mm256_set1_epi16(255);
  for (int64_t b = 0; b < c.blocks; ++b) {
    const uint8_t* blk = c.scan.data() + b * c.quads * 64;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t h = 0; h < 2 * c.quads; ++h) {
      const __m256i lut = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qlut + 32 * h));
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 * h));
      const __m256i r0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low4));
      const __m256i r1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      a0 = _mm256_add_epi16(a0, _mm256_and_si256(r0, low8));
      a1 = _mm256_add_epi16(a1, _mm256_srli_epi16(r0, 8));
      a2 = _mm256_add_epi16(a2, _mm256_and_si256(r1, low8));
      a3 = _mm256_add_epi16(a3, _mm256_srli_epi16(r1, 8));
    }
    store_rows(lane_sum256(a0), lane_sum256(a1), out + b * 32);
    store_rows(lane_sum256(a2), lane_sum256(a3), out + b * 32 + 16);
  }
}

// The same with four subspaces (one 64-byte group) per register.
__attribute__((target("avx512f,avx512bw"))) void scan_avx512(const uint8_t* qlut, const FastScanCodes& c,
                                                             uint16_t* out) {
  const __m512i low4 = _mm512_set1_epi8(15), low8 = _mm512_set1_epi16(255);
  for (int64_t b = 0; b < c.blocks; ++b) {
    const uint8_t* blk = c.scan.data() + b * c.quads * 64;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t g = 0; g < c.quads; ++g) {
      const __m512i lut = _mm512_loadu_si512(qlut + 64 * g);
      const __m512i v = _mm512_loadu_si512(blk + 64 * g);
      const __m512i r0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low4));
      const __m512i r1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      a0 = _mm512_add_epi16(a0, _mm512_and_si512(r0, low8));
      a1 = _mm512_add_epi16(a1, _mm512_srli_epi16(r0, 8));
      a2 = _mm512_add_epi16(a2, _mm512_and_si512(r1, low8));
      a3 = _mm512_add_epi16(a3, _mm512_srli_epi16(r1, 8));
    }
    store_rows(lane_sum512(a0), lane_sum512(a1), out + b * 32);
    store_rows(lane_sum512(a2), lane_sum512(a3), out + b * 32 + 16);
  }
}
#endif

// ---- exact float scores of chosen rows ----------------------------------------------------------

void rescore_portable(const float* lut, const FastScanCodes& c, const uint32_t* rows, int64_t count, float* out,
                      int64_t from = 0) {
  for (int64_t r = from; r < count; ++r) {
    const uint8_t* row = c.rows.data() + int64_t{rows[r]} * c.row_bytes;
    float s = 0;
    for (int64_t j = 0; j < c.m; ++j) s += lut[j * 16 + ((row[j / 2] >> (4 * (j % 2))) & 15)];
    out[r] = s;
  }
}

#if KVTOOL_X86_TARGETS
// Eight rows at a time: one gather of 32 bits per row brings eight subspaces' codes; each table
// lookup is a gather from that subspace's 16 floats.
__attribute__((target("avx2"))) void rescore_avx2(const float* lut, const FastScanCodes& c, const uint32_t* rows,
                                                  int64_t count, float* out) {
  const auto* base = reinterpret_cast<const int*>(c.rows.data());
  const __m256i stride = _mm256_set1_epi32(static_cast<int>(c.row_bytes)), low4 = _mm256_set1_epi32(15);
  const int64_t n8 = count / 8 * 8;
  for (int64_t r = 0; r < n8; r += 8) {
    const __m256i off = _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r)), stride);
    __m256 s = _mm256_setzero_ps();
    for (int64_t g = 0; g * 8 < c.m; ++g) {
      __m256i v = _mm256_i32gather_epi32(base, _mm256_add_epi32(off, _mm256_set1_epi32(static_cast<int>(4 * g))), 1);
      for (int64_t j = 8 * g; j < std::min(c.m, 8 * g + 8); ++j, v = _mm256_srli_epi32(v, 4))
        s = _mm256_add_ps(s, _mm256_i32gather_ps(lut + j * 16, _mm256_and_si256(v, low4), 4));
    }
    _mm256_storeu_ps(out + r, s);
  }
  rescore_portable(lut, c, rows, count, out, n8);
}

// Sixteen rows at a time, two such groups interleaved (each row's sum is one chain of dependent
// adds, in pq_scores_u8's order; two independent chains hide the add latency); each subspace's 16
// floats are one register, read with a permute.
__attribute__((target("avx512f,avx512bw"))) void rescore_avx512(const float* lut, const FastScanCodes& c,
                                                                const uint32_t* rows, int64_t count, float* out) {
  const auto* base = reinterpret_cast<const int*>(c.rows.data());
  const __m512i stride = _mm512_set1_epi32(static_cast<int>(c.row_bytes)), low4 = _mm512_set1_epi32(15);
  const int64_t n32 = count / 32 * 32;
  for (int64_t r = 0; r < n32; r += 32) {
    const __m512i off0 = _mm512_mullo_epi32(_mm512_loadu_si512(rows + r), stride);
    const __m512i off1 = _mm512_mullo_epi32(_mm512_loadu_si512(rows + r + 16), stride);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t g = 0; g * 8 < c.m; ++g) {
      const __m512i at = _mm512_set1_epi32(static_cast<int>(4 * g));
      __m512i v0 = _mm512_i32gather_epi32(_mm512_add_epi32(off0, at), base, 1);
      __m512i v1 = _mm512_i32gather_epi32(_mm512_add_epi32(off1, at), base, 1);
      for (int64_t j = 8 * g; j < std::min(c.m, 8 * g + 8); ++j) {
        const __m512 t = _mm512_loadu_ps(lut + j * 16);
        s0 = _mm512_add_ps(s0, _mm512_permutexvar_ps(_mm512_and_si512(v0, low4), t));
        s1 = _mm512_add_ps(s1, _mm512_permutexvar_ps(_mm512_and_si512(v1, low4), t));
        v0 = _mm512_srli_epi32(v0, 4);
        v1 = _mm512_srli_epi32(v1, 4);
      }
    }
    _mm512_storeu_ps(out + r, s0);
    _mm512_storeu_ps(out + r + 16, s1);
  }
  rescore_portable(lut, c, rows, count, out, n32);
}
#endif

// ---- candidates ---------------------------------------------------------------------------------

// Every row i < n with q[i] >= lo into out (ascending) and its q[i] into qout; `at_t` counts the
// rows with q[i] >= t.
int64_t collect_portable(const uint16_t* q, int64_t n, uint32_t lo, uint32_t t, uint32_t* out, uint32_t* qout,
                         int64_t& at_t, int64_t from = 0) {
  int64_t w = 0;
  for (int64_t i = from; i < n; ++i) {
    out[w] = static_cast<uint32_t>(i);
    qout[w] = q[i];
    w += q[i] >= lo;
    at_t += q[i] >= t;
  }
  return w;
}

#if KVTOOL_X86_TARGETS
__attribute__((target("avx512f,avx512bw"))) int64_t collect_avx512(const uint16_t* q, int64_t n, uint32_t lo,
                                                                   uint32_t t, uint32_t* out, uint32_t* qout,
                                                                   int64_t& at_t) {
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo)), vt = _mm512_set1_epi32(static_cast<int>(t)),
                step = _mm512_set1_epi32(16);
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t n16 = n / 16 * 16;
  int64_t w = 0;
  for (int64_t i = 0; i < n16; i += 16, ids = _mm512_add_epi32(ids, step)) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i)));
    const __mmask16 keep = _mm512_cmpge_epu32_mask(v, vlo);
    _mm512_storeu_si512(out + w, _mm512_maskz_compress_epi32(keep, ids));
    _mm512_storeu_si512(qout + w, _mm512_maskz_compress_epi32(keep, v));
    w += __builtin_popcount(keep);
    at_t += __builtin_popcount(_mm512_cmpge_epu32_mask(v, vt));
  }
  return w + collect_portable(q, n, lo, t, out + w, qout + w, at_t, n16);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

int64_t collect(const uint16_t* q, int64_t n, uint32_t lo, uint32_t t, uint32_t* out, uint32_t* qout, int64_t& at_t) {
  at_t = 0;
#if KVTOOL_X86_TARGETS
  if (simd_level() == Simd::avx512) return collect_avx512(q, n, lo, t, out, qout, at_t);
#endif
  return collect_portable(q, n, lo, t, out, qout, at_t);
}

// ---- the quantized tables and the margin --------------------------------------------------------

// FAISS's quantization of the table: entry (j, c) becomes round(a * (lut[j][c] - min_j)) with one
// scale a = 255 / (largest span of a subspace), each within 1/2 of a * (its float minus min_j)
// (computed in double: the error of that product is far below the unit kept in the margin).
//
// Why the margin keeps the answer exact. Let R_i be row i's real sum of its table floats, F_i the
// float sum pq_scores_u8 computes, Q_i the 16-bit sum. Then |Q_i - a (R_i - sum_j min_j)| <= m / 2
// (+ the double's error), and |F_i - R_i| <= E = m 2^-23 sum_j max_c |lut[j][c]| (recursive
// summation in float). If Q_r - Q_i > margin = m + 2 a E + 1, then a (R_r - R_i) > 2 a E, so
// F_r > F_i. So when at least b rows have Q >= t, a row with Q < t - margin has b rows strictly
// better in F and is not among the b best (ties included); every row of the answer has
// Q >= t - margin and is a candidate.
struct Quantized {
  bool ok = false;  // false: non-finite or huge table entries; every row is then a candidate
  int64_t margin = 0;
  uint32_t qmax = 0;  // the largest possible Q
};

Quantized quantize(const float* lut, int64_t m, int64_t quads, uint8_t* qlut) {
  double span = 0, sum_abs = 0;
  for (int64_t j = 0; j < m; ++j) {
    const float* t = lut + j * 16;
    if (!std::all_of(t, t + 16, [](float x) { return std::isfinite(x); })) return {};
    const auto [lo, hi] = std::minmax_element(t, t + 16);
    span = std::max(span, double{*hi} - double{*lo});
    sum_abs += std::max(std::fabs(double{*lo}), std::fabs(double{*hi}));
  }
  if (sum_abs > 1e30) return {};
  const double a = span > 0 ? 255.0 / span : 0.0;
  std::fill(qlut, qlut + quads * 64, uint8_t{0});  // subspaces past m add 0
  for (int64_t j = 0; j < m; ++j) {
    const float* t = lut + j * 16;
    const double lo = *std::min_element(t, t + 16);
    for (int64_t c = 0; c < 16; ++c)
      qlut[j * 16 + c] = static_cast<uint8_t>(std::min(255.0, std::floor((double{t[c]} - lo) * a + 0.5)));
  }
  const double e = static_cast<double>(m) * std::ldexp(sum_abs, -23);
  return {true, m + static_cast<int64_t>(std::ceil(2 * a * e)) + 1, static_cast<uint32_t>(255 * m)};
}

struct Scratch {
  std::vector<uint8_t> qlut;
  std::vector<uint16_t> q;
  std::vector<uint32_t> cand, candq, hist;
  std::vector<float> score;
  std::vector<int64_t> order;
};
template <typename T>
T* room(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// A level t with at least rank + 1 of a strided sample of q at or above it: the lower edge of the
// histogram bucket (of at most 1024) that holds the sample's rank-th largest. The sample bounds
// the b-th largest of all rows from below with a margin of 4 binomial standard deviations (plus
// 4); the caller checks that at least b rows reach t.
uint32_t sampled_level(const uint16_t* q, int64_t n, int64_t b, uint32_t qmax, uint32_t* hist, bool& ok) {
  constexpr int64_t kSample = 2048;
  const double p = static_cast<double>(b) / static_cast<double>(n);
  const auto rank = static_cast<int64_t>(p * kSample + 4 * std::sqrt(kSample * p * (1 - p)) + 4);
  ok = rank < kSample;
  if (!ok) return 0;
  int shift = 0;
  while ((qmax >> shift) >= 1024) ++shift;
  std::fill(hist, hist + (qmax >> shift) + 1, 0u);
  for (int64_t s = 0; s < kSample; ++s) ++hist[q[s * n / kSample] >> shift];
  int64_t seen = 0;
  uint32_t t = qmax >> shift;
  while ((seen += hist[t]) <= rank) --t;
  return t << shift;
}

// The b-th largest of q[0, n) exactly, from a histogram of every value.
uint32_t exact_level(const uint16_t* q, int64_t n, int64_t b, uint32_t qmax, uint32_t* hist) {
  std::fill(hist, hist + qmax + 1, 0u);
  for (int64_t i = 0; i < n; ++i) ++hist[q[i]];
  int64_t seen = 0;
  uint32_t t = qmax;
  while ((seen += hist[t]) < b) --t;
  return t;
}

// Candidates out[0, w) (ascending), every row with Q >= lo, where lo = t - margin and at least b
// rows reach t: the b-th largest Q of all rows, t*, is at least t, so it is the b-th largest of
// the candidates' Q too, found with a histogram of their Q alone; the rows with Q >= t* - margin
// (a subset: t* - margin >= lo) are the candidates quantize asks for, in order. The sampled level
// overshoots the b-th best by a few hundred rows; this drops them before the rescoring and the
// final ranking, which cost more per row than this pass.
int64_t narrow(const uint32_t* qv, uint32_t* out, int64_t w, int64_t b, uint32_t lo, const Quantized& qz,
               uint32_t* hist) {
  const uint32_t hi = *std::max_element(qv, qv + w);
  std::fill(hist + lo, hist + hi + 1, 0u);
  for (int64_t r = 0; r < w; ++r) ++hist[qv[r]];
  int64_t seen = 0;
  uint32_t t = hi;
  while ((seen += hist[t]) < b) --t;
  const uint32_t keep = t > qz.margin ? static_cast<uint32_t>(t - qz.margin) : 0u;
  if (keep <= lo) return w;
  int64_t kept = 0;
  for (int64_t r = 0; r < w; ++r) {
    out[kept] = out[r];
    kept += qv[r] >= keep;
  }
  return kept;
}

// The candidate rows (ascending) of the b best, 0 < b < n: see quantize.
int64_t candidates(const Quantized& qz, const uint8_t* qlut, const FastScanCodes& c, int64_t b, Scratch& s) {
  const int64_t n = c.n;
  uint16_t* q = room(s.q, c.blocks * 32);
  uint32_t* out = room(s.cand, n + 16);
  uint32_t* qv = room(s.candq, n + 16);
  uint32_t* hist = room(s.hist, int64_t{qz.qmax} + 1);
  fastscan_scores_u16(qlut, c, q);
  auto below = [&](uint32_t t) { return t > qz.margin ? static_cast<uint32_t>(t - qz.margin) : 0u; };
  int64_t at_t = 0;
  if (n >= 4096 && b <= n / 4) {
    bool ok = false;
    const uint32_t t = sampled_level(q, n, b, qz.qmax, hist, ok);
    if (ok) {
      const int64_t w = collect(q, n, below(t), t, out, qv, at_t);
      if (at_t >= b) return narrow(qv, out, w, b, below(t), qz, hist);
    }
  }
  const uint32_t t = exact_level(q, n, b, qz.qmax, hist);
  return collect(q, n, below(t), t, out, qv, at_t);
}

}  // namespace

void fastscan_scores_u16(const uint8_t* qlut, const FastScanCodes& codes, uint16_t* out) {
#if KVTOOL_X86_TARGETS
  const Simd level = simd_level();
  if (level == Simd::avx512) return scan_avx512(qlut, codes, out);
  if (level == Simd::avx2) return scan_avx2(qlut, codes, out);
#endif
  scan_portable(qlut, codes, out);
}

void fastscan_rescore(const float* lut, const FastScanCodes& codes, const uint32_t* rows, int64_t count, float* out) {
#if KVTOOL_X86_TARGETS
  const Simd level = simd_level();
  if (level == Simd::avx512) return rescore_avx512(lut, codes, rows, count, out);
  if (level == Simd::avx2) return rescore_avx2(lut, codes, rows, count, out);
#endif
  rescore_portable(lut, codes, rows, count, out);
}

int64_t fastscan_top_k(const float* lut, const FastScanCodes& codes, int64_t k, int64_t* ids, float* scores) {
  const int64_t n = codes.n, b = std::max<int64_t>(0, std::min(k, n));
  if (b == 0) return 0;
  thread_local Scratch s;
  const Quantized qz = quantize(lut, codes.m, codes.quads, room(s.qlut, codes.quads * 64));
  int64_t w = n;
  if (qz.ok && b < n) {
    w = candidates(qz, s.qlut.data(), codes, b, s);
  } else {
    uint32_t* all = room(s.cand, n);  // grown before its end is taken
    std::iota(all, all + n, 0u);
  }
  float* score = room(s.score, n);
  fastscan_rescore(lut, codes, s.cand.data(), w, score);
  int64_t* order = room(s.order, b);
  const int64_t kept = top_k_few_into(score, w, b, order);
  for (int64_t r = 0; r < kept; ++r) {
    ids[r] = s.cand[static_cast<size_t>(order[r])];
    scores[r] = score[order[r]];
  }
  return kept;
}

}  // namespace kvtool::scoring
