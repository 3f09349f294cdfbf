#include "impl/eval_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvtool/cpu_features.h"
#if KVTOOL_X86_TARGETS
#include <immintrin.h>
#endif

namespace kvtool::eval {

using scoring::Simd;

namespace {

constexpr int kLanes = 8;

// exp(x) = 2^k exp(r), k = round(x log2 e), r = x - k ln2 (ln2 split in two, fdlibm's constants,
// so k ln2_hi is exact for |k| < 2^11); |r| <= ln2/2, where the Taylor terms past r^13/13! are
// about 2^-57 of the result (under half an ulp). Inputs in [-708, 0] keep 2^k a normal double (k >= -1022); any other
// (NaN included) takes std::exp.
constexpr double kLog2e = 1.4426950408889634, kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10,
                 kLowest = -708.0;
constexpr int kDegree = 13;
constexpr double kInvFactorial[kDegree + 1] = {
    1.0,        1.0,         1.0 / 2,      1.0 / 6,       1.0 / 24,       1.0 / 120,       1.0 / 720,
    1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};

// The fixed-order reductions every level shares: lanes combined as ((l0 + l1) + (l2 + l3)) + ...
double combine(const double* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The portable softmax; the AVX-512 and AVX2 ones below are the same steps, lane for lane.
double softmax_portable(double* z, int64_t n) {
  double mx = -INFINITY;
  for (int64_t r = 0; r < n; ++r) mx = std::max(mx, z[r]);
  double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t r = 0; r < n; ++r) lane[r % kLanes] += (z[r] = std::exp(z[r] - mx));
  const double sum = combine(lane), inv = 1 / sum;
  for (int64_t r = 0; r < n; ++r) z[r] *= inv;
  return mx + std::log(sum);
}

[[gnu::always_inline]] inline void widen_loop(const float* in, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i];
}

void add_rows_portable(const double* wk, const int64_t* ids, size_t count, const float* V, int64_t d, double* acc) {
  for (size_t k = 0; k < count; ++k) {
    const float* v = V + ids[k] * d;
    for (int64_t t = 0; t < d; ++t) acc[t] += wk[k] * v[t];
  }
}

#if KVTOOL_X86_TARGETS
// GCC 12 reports its own AVX-512 headers' undefined first operands (_mm512_undefined_*, used by
// the conversion intrinsics) as maybe-uninitialized: not a use of uninitialized data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Lanes outside [-708, 0] (NaN included) take std::exp one by one; the others the polynomial, on
// the input clamped into the range (a lane's result never depends on its neighbours, so the
// AVX-512 and AVX2 paths agree lane for lane).
__attribute__((target("avx512f"))) __m512d exp8_avx512(__m512d v) {
  const __m512d lo = _mm512_set1_pd(kLowest), zero = _mm512_setzero_pd();
  const __mmask8 in = _mm512_cmp_pd_mask(v, lo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(v, zero, _CMP_LE_OQ);
  const __m512d x = _mm512_min_pd(_mm512_max_pd(v, lo), zero);
  const __m512d k =
      _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x));
  __m512d p = _mm512_set1_pd(kInvFactorial[kDegree]);
  for (int j = kDegree - 1; j >= 0; --j) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFactorial[j]));
  const __m512i e =
      _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(k)), _mm512_set1_epi64(1023)), 52);
  p = _mm512_mul_pd(p, _mm512_castsi512_pd(e));
  if (in == 0xff) return p;
  alignas(64) double in_v[kLanes], out[kLanes];
  _mm512_store_pd(in_v, v);
  _mm512_store_pd(out, p);
  for (int j = 0; j < kLanes; ++j)
    if (!((in >> j) & 1)) out[j] = std::exp(in_v[j]);
  return _mm512_load_pd(out);
}

__attribute__((target("avx512f"))) double softmax_avx512(double* z, int64_t n) {
  const int64_t full = n / kLanes * kLanes;
  __m512d top = _mm512_set1_pd(-INFINITY);
  for (int64_t r = 0; r < full; r += kLanes) top = _mm512_max_pd(_mm512_loadu_pd(z + r), top);
  alignas(64) double t[kLanes];
  _mm512_store_pd(t, top);
  double mx = *std::max_element(t, t + kLanes);
  for (int64_t r = full; r < n; ++r) mx = std::max(mx, z[r]);
  const __m512d vmx = _mm512_set1_pd(mx);
  __m512d lanes = _mm512_setzero_pd();
  for (int64_t r = 0; r < full; r += kLanes) {
    const __m512d p = exp8_avx512(_mm512_sub_pd(_mm512_loadu_pd(z + r), vmx));
    _mm512_storeu_pd(z + r, p);
    lanes = _mm512_add_pd(lanes, p);
  }
  alignas(64) double lane[kLanes];
  _mm512_store_pd(lane, lanes);
  for (int64_t r = full; r < n; ++r) lane[r - full] += (z[r] = std::exp(z[r] - mx));
  const double sum = combine(lane), inv = 1 / sum;
  for (int64_t r = 0; r < full; r += kLanes)
    _mm512_storeu_pd(z + r, _mm512_mul_pd(_mm512_loadu_pd(z + r), _mm512_set1_pd(inv)));
  for (int64_t r = full; r < n; ++r) z[r] *= inv;
  return mx + std::log(sum);
}

// The same operations as exp8_avx512, on half the lanes.
__attribute__((target("avx2,fma"))) __m256d exp4_avx2(__m256d v) {
  const __m256d lo = _mm256_set1_pd(kLowest), zero = _mm256_setzero_pd();
  const int in =
      _mm256_movemask_pd(_mm256_and_pd(_mm256_cmp_pd(v, lo, _CMP_GE_OQ), _mm256_cmp_pd(v, zero, _CMP_LE_OQ)));
  const __m256d x = _mm256_min_pd(_mm256_max_pd(v, lo), zero);
  const __m256d k =
      _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), x));
  __m256d p = _mm256_set1_pd(kInvFactorial[kDegree]);
  for (int j = kDegree - 1; j >= 0; --j) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFactorial[j]));
  const __m256i e =
      _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)), _mm256_set1_epi64x(1023)), 52);
  p = _mm256_mul_pd(p, _mm256_castsi256_pd(e));
  if (in == 0xf) return p;
  alignas(32) double in_v[4], out[4];
  _mm256_store_pd(in_v, v);
  _mm256_store_pd(out, p);
  for (int j = 0; j < 4; ++j)
    if (!((in >> j) & 1)) out[j] = std::exp(in_v[j]);
  return _mm256_load_pd(out);
}

// Lanes 0-3 and 4-7 of softmax_avx512 in two registers.
__attribute__((target("avx2,fma"))) double softmax_avx2(double* z, int64_t n) {
  const int64_t full = n / kLanes * kLanes;
  __m256d top0 = _mm256_set1_pd(-INFINITY), top1 = top0;
  for (int64_t r = 0; r < full; r += kLanes) {
    top0 = _mm256_max_pd(_mm256_loadu_pd(z + r), top0);
    top1 = _mm256_max_pd(_mm256_loadu_pd(z + r + 4), top1);
  }
  alignas(32) double t[kLanes];
  _mm256_store_pd(t, top0);
  _mm256_store_pd(t + 4, top1);
  double mx = *std::max_element(t, t + kLanes);
  for (int64_t r = full; r < n; ++r) mx = std::max(mx, z[r]);
  const __m256d vmx = _mm256_set1_pd(mx);
  __m256d lanes0 = _mm256_setzero_pd(), lanes1 = lanes0;
  for (int64_t r = 0; r < full; r += kLanes) {
    const __m256d p0 = exp4_avx2(_mm256_sub_pd(_mm256_loadu_pd(z + r), vmx));
    const __m256d p1 = exp4_avx2(_mm256_sub_pd(_mm256_loadu_pd(z + r + 4), vmx));
    _mm256_storeu_pd(z + r, p0);
    _mm256_storeu_pd(z + r + 4, p1);
    lanes0 = _mm256_add_pd(lanes0, p0);
    lanes1 = _mm256_add_pd(lanes1, p1);
  }
  alignas(32) double lane[kLanes];
  _mm256_store_pd(lane, lanes0);
  _mm256_store_pd(lane + 4, lanes1);
  for (int64_t r = full; r < n; ++r) lane[r - full] += (z[r] = std::exp(z[r] - mx));
  const double sum = combine(lane), inv = 1 / sum;
  for (int64_t r = 0; r < full; r += 4)
    _mm256_storeu_pd(z + r, _mm256_mul_pd(_mm256_loadu_pd(z + r), _mm256_set1_pd(inv)));
  for (int64_t r = full; r < n; ++r) z[r] *= inv;
  return mx + std::log(sum);
}
__attribute__((target("avx512f"))) void widen_avx512(const float* in, double* out, int64_t n) {
  widen_loop(in, out, n);
}
__attribute__((target("avx2,fma"))) void widen_avx2(const float* in, double* out, int64_t n) { widen_loop(in, out, n); }
// 32 accumulators at a time held in registers across the rows (acc in memory would be a load and
// a store per row); each still adds the rows in the order given. d % 32 != 0 takes the portable loop.
__attribute__((target("avx512f"))) void add_rows_avx512(const double* wk, const int64_t* ids, size_t count,
                                                        const float* V, int64_t d, double* acc) {
  for (int64_t t0 = 0; t0 < d; t0 += 32) {
    __m512d a[4];
    for (int j = 0; j < 4; ++j) a[j] = _mm512_loadu_pd(acc + t0 + 8 * j);
    for (size_t k = 0; k < count; ++k) {
      const __m512d w = _mm512_set1_pd(wk[k]);
      const float* v = V + ids[k] * d + t0;
      for (int j = 0; j < 4; ++j) a[j] = _mm512_fmadd_pd(w, _mm512_cvtps_pd(_mm256_loadu_ps(v + 8 * j)), a[j]);
    }
    for (int j = 0; j < 4; ++j) _mm512_storeu_pd(acc + t0 + 8 * j, a[j]);
  }
}

__attribute__((target("avx2,fma"))) void add_rows_avx2(const double* wk, const int64_t* ids, size_t count,
                                                       const float* V, int64_t d, double* acc) {
  for (int64_t t0 = 0; t0 < d; t0 += 32) {
    __m256d a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_pd(acc + t0 + 4 * j);
    for (size_t k = 0; k < count; ++k) {
      const __m256d w = _mm256_set1_pd(wk[k]);
      const float* v = V + ids[k] * d + t0;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_pd(w, _mm256_cvtps_pd(_mm_loadu_ps(v + 4 * j)), a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_pd(acc + t0 + 4 * j, a[j]);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The AVX2 paths use FMA too (every AVX2 CPU kvtool knows of has it, but it is a separate flag).
bool avx2_fma(Simd level) { return level == Simd::avx2 && cpu_features().fma; }
#endif

}  // namespace

double softmax_row(double* z, int64_t n, Simd level) {
#if KVTOOL_X86_TARGETS
  if (level == Simd::avx512) return softmax_avx512(z, n);
  if (avx2_fma(level)) return softmax_avx2(z, n);
#endif
  (void)level;
  return softmax_portable(z, n);
}

void widen(const float* in, double* out, int64_t n, Simd level) {
#if KVTOOL_X86_TARGETS
  if (level == Simd::avx512) return widen_avx512(in, out, n);
  if (avx2_fma(level)) return widen_avx2(in, out, n);
#endif
  (void)level;
  widen_loop(in, out, n);
}

void add_rows(const double* wk, const int64_t* ids, size_t count, const float* V, int64_t d, double* acc, Simd level) {
#if KVTOOL_X86_TARGETS
  if (d % 32 == 0 && level == Simd::avx512) return add_rows_avx512(wk, ids, count, V, d, acc);
  if (d % 32 == 0 && avx2_fma(level)) return add_rows_avx2(wk, ids, count, V, d, acc);
#endif
  (void)level;
  add_rows_portable(wk, ids, count, V, d, acc);
}

}  // namespace kvtool::eval
