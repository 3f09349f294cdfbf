// What the files of the query arithmetic share (private to lib/runtime; the contract is
// kvtool/scoring.h): the portable loops the SIMD kernels finish their tails with, and the kernels of
// each instruction set (scoring_avx2.cpp, scoring_avx512.cpp) that scoring_pq.cpp, selection.cpp and
// simhash.cpp choose between by simd_level(). Every kernel computes its portable loop's bits.
//
// A kernel is declared with the very target attribute it is defined with: GCC and Clang take a
// declaration whose target differs for another version of the function (multiversioning).
#pragma once
#include <cstdint>

#include "kvtool/cpu_features.h"
#include "kvtool/scoring.h"

#if KVTOOL_X86_TARGETS
#include <immintrin.h>
#endif

namespace kvtool::scoring::detail {

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

// The tables' entries [from, k) of every subspace (pq_lut_t's portable loop; scoring_pq.cpp).
void lut_t_portable(const float* q, const float* ct, int64_t m, int64_t k, int64_t dsub, float* lut, int64_t from);

#if KVTOOL_X86_TARGETS
// scoring_avx2.cpp
template <typename Code>
__attribute__((target("avx2"))) void cm_avx2(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k,
                                             float* score, int64_t from, int64_t to);
__attribute__((target("avx2"))) void simhash_products_avx2(const float* x, int64_t rows, int64_t d, const float* w,
                                                           int64_t cols, float* out);
__attribute__((target("avx2"))) void lut_t_avx2(const float* q, const float* ct, int64_t m, int64_t k, int64_t dsub,
                                                float* lut);
// collect_at_most (selection_internal.h) eight scores at a time; out holds n + 16 keys, as there.
__attribute__((target("avx2"))) int64_t collect_at_most_avx2(const float* score, int64_t n, uint32_t t, uint64_t* out);

// scoring_avx512.cpp
template <typename Code>
__attribute__((target("avx512f,avx512bw"))) void cm_avx512(const float* lut, const Code* codes, int64_t n, int64_t m,
                                                           int64_t k, float* score, int64_t from, int64_t to);
// The g queries' scores (pq_scores_cm_group) four queries at a time, each four sharing one pass
// over the codes; for tables of more than 64 entries (smaller ones fit registers in cm_avx512).
template <typename Code>
void cm_groups_avx512(const float* luts, int64_t g, const Code* codes, int64_t n, int64_t m, int64_t k, float* scores);
__attribute__((target("avx512f"))) void lut_t_avx512(const float* q, const float* ct, int64_t m, int64_t k,
                                                     int64_t dsub, float* lut);
__attribute__((target("avx512f"))) int64_t collect_at_most_avx512(const float* score, int64_t n, uint32_t t,
                                                                  uint64_t* out);
__attribute__((target("avx512f"))) void simhash_products_avx512(const float* x, int64_t rows, int64_t d, const float* w,
                                                                int64_t cols, float* out);
#endif

}  // namespace kvtool::scoring::detail
