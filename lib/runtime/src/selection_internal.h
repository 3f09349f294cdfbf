// What the selections share (private to kvtool_runtime: selection.cpp, scoring_avx512.cpp and pq's
// selection by row groups, lib/kinds/pq/pq_row_groups.cpp): the selection key, the per-thread
// scratch, and the steps of a sampled selection. The contract is kvtool/scoring.h.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvtool/scoring.h"

namespace kvtool::scoring::detail {

// A key whose ascending order is the selection order (score descending, then id ascending): the
// float's bits mapped to an unsigned value of the same order (negatives flipped, -0 folded into
// +0 since they compare equal), complemented so that larger scores come first, with the id in the
// low half. Sorting plain integers avoids the indirect comparator's cache misses.
// Branch-free (a score's sign is a coin flip a branch predictor loses half the time): -0 + 0 is
// +0 in IEEE round-to-nearest, and the mask flips every bit of a negative float but only the
// sign bit of a positive one.
inline uint64_t selection_key(float s, int64_t id) {
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
inline uint64_t* room(std::vector<uint64_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
inline SelectionScratch& selection_scratch() {
  thread_local SelectionScratch s;
  return s;
}

// The selection key's high half alone: ascending order = score descending (see selection_key).
inline uint32_t score_key(float s) { return static_cast<uint32_t>(selection_key(s, 0) >> 32); }

// Sorts keys[0, n) ascending by their bits [from, 64): LSD radix sort by 11-bit digits (stable:
// keys equal in those bits keep their order), skipping the digits in which all keys agree (a
// selection's keys share most of their high bits). `tmp` holds n keys.
void radix_sort(uint64_t* keys, int64_t n, uint64_t* tmp, int from = 0);

// Every i in [from, n) whose score_key is <= t, as (key << 32 | i) in ascending i; returns the count.
// out holds n + 16 keys.
int64_t collect_at_most(const float* score, int64_t n, uint32_t t, uint64_t* out, int64_t from = 0);
// collect_at_most at the Simd level in use.
int64_t collect(const float* score, int64_t n, uint32_t t, uint64_t* out);

// An upper bound t on the key of sample rank `rank` (0-based): the top edge of the bucket of the
// sample's key range that holds that rank, so at least rank + 1 sample keys are <= t. Buckets
// instead of nth_element, whose data-dependent branches cost more than the rest of the selection;
// t only sets how many rows the exact pass keeps, never the answer.
uint32_t sample_bound(const uint32_t* sample, int64_t count, int64_t rank, uint32_t* hist);

// Sorts w keys (score key << 32 | id), which arrive in ascending id order, by the score key alone:
// stable, so that is the full order. An LSD radix sort of the score key's offset from the
// smallest, in as few passes as the offsets' range needs with digits of at most 11 bits and of
// about log2(w) bits (the top tenth of 32K PQ scores spans 23-25 bits: three passes of 8-9 bits),
// so that the buckets' bookkeeping stays below the keys' count: a few hundred kept code pairs
// spent most of their sort clearing and summing 4,096 buckets. Every pass's histogram is counted
// in one read. Returns keys or tmp (w keys), whichever holds the sorted keys.
uint64_t* sort_by_score_key(uint64_t* keys, int64_t w, uint64_t* tmp, uint32_t* hist);

// The rank in a strided sample of kSelectionSample keys whose key bounds the b-th smallest of n
// from above with a margin of 4 binomial standard deviations (plus 4); -1 when that rank is not
// below the sample's last, so the sample cannot bound it.
int64_t sample_rank(int64_t b, int64_t n);

// The b-th smallest (1 <= b <= n) of the distinct keys[0, n), which stay as they are: a histogram
// of the keys' range finds the bucket holding it and the search narrows into that bucket's keys
// (gathered into sc.tied), 2^11-fold a level, so 64-bit keys take at most 6 levels.
uint64_t kth_smallest(const uint64_t* keys, int64_t n, int64_t b, SelectionScratch& sc);

}  // namespace kvtool::scoring::detail
