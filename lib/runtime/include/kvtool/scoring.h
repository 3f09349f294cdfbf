// The arithmetic every selector's query runs, as plain functions over plain arrays: PQ lookup-table
// scoring, best-first ordering, centroid dot products and SimHash collision counting. The kinds
// (lib/kinds/*/*_select.cpp) call these, and the CUDA kernels (cuda/src/kernels.cu) are tested against
// them in a standalone build (tests/gpu) that has none of the library's other dependencies — so this
// header and its sources (lib/runtime/src: scoring.cpp, scoring_pq.cpp, selection.cpp, simhash.cpp,
// scoring_avx2.cpp, scoring_avx512.cpp) must depend on the C++ standard library only (and the
// header-only kvtool/cpu_features.h). pq's selection by row groups is lib/kinds/pq/pq_row_groups.h.
//
// Summation orders are part of the contract: each sum runs over its index in increasing order in
// the stated precision, without fused multiply-add, so a device mirror reproduces the scores bit
// for bit and ranking ties (broken by lower id) fall the same way on both paths.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtool::scoring {

// lut[j * k + c] = sum_t q[j * dsub + t] * centroids[(j * k + c) * dsub + t]   (float)
void pq_lut(const float* q, const float* centroids, int64_t m, int64_t k, int64_t dsub, float* lut);
// The same table from codebooks stored transposed, centroids_t[(j * dsub + t) * k + c] (a
// subspace's k centroids side by side, so its k sums run in parallel lanes): equal to pq_lut bit
// for bit at every Simd level (each entry still adds its products over t in increasing order).
void pq_lut_t(const float* q, const float* centroids_t, int64_t m, int64_t k, int64_t dsub, float* lut);
// score[i] = sum_j lut[j * k + code(i, j)]   (float; codes row-major [n, m], u8 or u16)
void pq_scores_u8(const float* lut, const uint8_t* codes, int64_t n, int64_t m, int64_t k, float* score);
void pq_scores_u16(const float* lut, const uint16_t* codes, int64_t n, int64_t m, int64_t k, float* score);

// The same scores from column-major codes, the layout the selectors keep: codes[j * n + i] is
// row i's code in subspace j, so each subspace is one contiguous stream. Row i's sum still starts
// at 0 and adds subspace 0, 1, ... in float, so these equal pq_scores_u8/u16 bit for bit at every
// Simd level.
void pq_scores_cm_u8(const float* lut, const uint8_t* codes, int64_t n, int64_t m, int64_t k, float* score);
void pq_scores_cm_u16(const float* lut, const uint16_t* codes, int64_t n, int64_t m, int64_t k, float* score);
// Row-major one-byte codes [n, m] into that layout: out[j * n + i] = codes[i * m + j] (SSE2 blocks
// where it has them; the same bytes).
void codes_to_column_major(const uint8_t* codes, int64_t n, int64_t m, uint8_t* out);

// The scores of g queries over the same column-major codes in one pass over the codes (the query
// heads of one kv head share its codes): query q's table at luts + q * m * k, its scores at
// scores + q * n, each equal bit for bit to pq_scores_cm_u8/u16 of that query alone.
void pq_scores_cm_group_u8(const float* luts, int64_t g, const uint8_t* codes, int64_t n, int64_t m, int64_t k,
                           float* scores);
void pq_scores_cm_group_u16(const float* luts, int64_t g, const uint16_t* codes, int64_t n, int64_t m, int64_t k,
                            float* scores);

// Instruction sets the column-major scorers use, chosen at run time from what the CPU reports:
// AVX-512 (F+BW) or AVX2 where present, portable loops otherwise, so a CPU without AVX-512 never
// meets one of its instructions. Every level computes the same bits (lookups and adds only).
enum class Simd { portable = 0, avx2 = 1, avx512 = 2 };
Simd simd_supported();  // the best level this CPU runs
Simd simd_level();      // the level in use (default: simd_supported())
// Caps the level in use at `cap` (tests compare the levels, benchmarks report each); returns it.
Simd set_simd_level(Simd cap);
const char* simd_name(Simd s);

// Indices of the min(k, n) best scores, best first; equal scores by lower index.
std::vector<int64_t> top_k(const float* score, int64_t n, int64_t k);
// The same indices written to out[0, min(k, n)) (returns that count). Allocation-free once the
// calling thread has selected from at least n rows before, whatever the scores (its scratch is
// kept per thread and sized by n).
int64_t top_k_into(const float* score, int64_t n, int64_t k, int64_t* out);
// top_k_into for n not much above k (a candidate set, as the fast scan's): every score is ranked by
// a stable radix sort of its bits alone (no selection pass, no sort by index), which is faster
// there; the same answer. Allocation-free like top_k_into.
int64_t top_k_few_into(const float* score, int64_t n, int64_t k, int64_t* out);
// The same indices as top_k_into, in increasing order (the order an engine gathers rows in): the
// b-th best is found by a selection and the kept indices are listed in one pass, with no sort of
// the b best. Allocation-free like top_k_into.
int64_t top_k_rows_into(const float* score, int64_t n, int64_t k, int64_t* out);
// Every index, best first; equal scores by lower index (a full ranking).
std::vector<int64_t> rank_all(const float* score, int64_t n);

// How many keys the sampled selections draw to bound their cut (top_k_into's, and pq's
// top_k_groups_into's: lib/kinds/pq/pq_row_groups.h).
constexpr int64_t kSelectionSample = 2048;

// out[c] = sum_t q[t] * centroids[c * d + t]   (float)
void dot_scores(const float* q, const float* centroids, int64_t count, int64_t d, float* out);
// out[i] = scale * sum_t double(q[t]) * centroids[rows[i] * d + t]   (double; rows == nullptr: row i)
void dot_scores_f64(const float* q, const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                    double* out);

// out[i * cols + c] = sum_j x[i * d + j] * w[j * cols + c]   (float, j increasing, from 0, no FMA;
// x row-major [rows, d], w row-major [d, cols]): the same bits at every Simd level, so a key's
// products at build time are the ones a query with the same values gets (lsh's codes).
void simhash_products(const float* x, int64_t rows, int64_t d, const float* w, int64_t cols, float* out);
// SimHash codes of one query: bit b of table t is set when sum_j q[j] * w[j * bits*tables + t*bits + b] > 0
// (simhash_products of the query, cols = bits * tables).
void simhash_codes(const float* q, int64_t d, const float* w, int64_t bits, int64_t tables, uint32_t* codes);
// count[ids[t * n + i] - base] += 1 for every member i of bucket codes[t] of every table t
// (offsets [tables, 2^bits + 1], CSR into ids [tables, n]).
void collision_counts(const uint32_t* codes, const uint32_t* offsets, const uint32_t* ids, int64_t tables,
                      int64_t buckets, int64_t n, int64_t base, uint16_t* count);

}  // namespace kvtool::scoring
