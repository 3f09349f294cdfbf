// Best-first selection (kvtool/scoring.h: top_k, top_k_into, top_k_few_into, rank_all): each score
// becomes an integer key whose order is the selection order (selection_internal.h), and a
// histogram selection and radix sorts order the keys.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "kvtool/scoring.h"
#include "scoring_kernels.h"
#include "selection_internal.h"

namespace kvtool::scoring {

using namespace detail;  // the internals this file shares (declared in its private header)

namespace {

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

// The bucket of a 2,048-bucket histogram over [lo, hi] (buckets 2^shift keys wide) that holds the
// b-th smallest of keys[0, n); `below` counts the keys of the lower buckets.
uint64_t bucket_of_rank(const uint64_t* keys, int64_t n, int64_t b, uint64_t lo, uint64_t hi, int& shift,
                        int64_t& below) {
  constexpr uint64_t kBuckets = 2048;
  shift = 0;
  while (((hi - lo) >> shift) >= kBuckets) ++shift;
  std::array<int64_t, kBuckets> count{};
  for (int64_t i = 0; i < n; ++i) ++count[(keys[i] - lo) >> shift];
  below = 0;
  uint64_t t = 0;
  while (below + count[t] < b) below += count[t++];
  return t;
}

// keys[0, n) lie in [lo, hi].
// `cap` (the top level's n) sizes every level's buffers, so that a thread's scratch stops growing
// once it has selected from that many keys, whatever the keys' distribution.
void select_smallest(uint64_t* keys, int64_t n, int64_t b, uint64_t lo, uint64_t hi, SelectionScratch& sc, int64_t cap,
                     int depth = 0) {
  int shift = 0;
  int64_t below = 0;
  const uint64_t t = bucket_of_rank(keys, n, b, lo, hi, shift, below);
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

// One LSD pass of sort_by_score_key: keys from src to dst by the digit at `shift` of their score
// key's offset from lo, at the positions `pos` (the digit's exclusive prefix sums, advanced as keys
// land).
void scatter_by_digit(const uint64_t* src, uint64_t* dst, int64_t w, uint32_t lo, int shift, uint32_t mask,
                      uint32_t* pos) {
  for (int64_t i = 0; i < w; ++i) dst[pos[((static_cast<uint32_t>(src[i] >> 32) - lo) >> shift) & mask]++] = src[i];
}

}  // namespace

namespace detail {

void radix_sort(uint64_t* keys, int64_t n, uint64_t* tmp, int from) {
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

int64_t collect_at_most(const float* score, int64_t n, uint32_t t, uint64_t* out, int64_t from) {
  int64_t w = 0;
  for (int64_t i = from; i < n; ++i) {
    const uint32_t key = score_key(score[i]);
    out[w] = (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(i);
    w += key <= t;
  }
  return w;
}

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

int64_t sample_rank(int64_t b, int64_t n) {
  const double p = static_cast<double>(b) / static_cast<double>(n);
  const int64_t expect = static_cast<int64_t>(p * kSelectionSample);
  const int64_t rank = expect + static_cast<int64_t>(4 * std::sqrt(kSelectionSample * p * (1 - p))) + 4;
  return rank >= kSelectionSample - 1 ? -1 : rank;
}

uint64_t kth_smallest(const uint64_t* keys, int64_t n, int64_t b, SelectionScratch& sc) {
  uint64_t lo = 0, hi = 0;
  extremes(keys, n, lo, hi);
  for (int depth = 0;; ++depth) {
    if (lo == hi) return lo;  // distinct keys: one left
    int shift = 0;
    int64_t below = 0;
    const uint64_t t = bucket_of_rank(keys, n, b, lo, hi, shift, below);
    b -= below;
    if (shift == 0) return lo + t;
    uint64_t* tied = room(sc.tied[depth], static_cast<size_t>(n));
    int64_t e = 0;
    for (int64_t i = 0; i < n; ++i) {
      tied[e] = keys[i];
      e += ((keys[i] - lo) >> shift) == t;
    }
    keys = tied, n = e;
    extremes(keys, n, lo, hi);
  }
}

int64_t collect(const float* score, int64_t n, uint32_t t, uint64_t* out) {
#if KVTOOL_X86_TARGETS
  if (simd_level() == Simd::avx512) return collect_at_most_avx512(score, n, t, out);
  if (simd_level() == Simd::avx2) return collect_at_most_avx2(score, n, t, out);
#endif
  return collect_at_most(score, n, t, out);
}

}  // namespace detail

namespace {

// The b smallest of those w keys ascending into order's ids.
void sort_kept(uint64_t* keys, int64_t w, int64_t b, uint64_t* tmp, uint32_t* hist, int64_t* order) {
  const uint64_t* sorted = sort_by_score_key(keys, w, tmp, hist);
  for (int64_t i = 0; i < b; ++i) order[i] = static_cast<int64_t>(sorted[i] & 0xffffffffu);
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

int64_t top_k_rows_into(const float* score, int64_t n, int64_t k, int64_t* out) {
  const int64_t b = std::max<int64_t>(0, std::min(k, n));
  if (b == 0) return 0;
  if (n > int64_t{UINT32_MAX}) {  // ids do not fit the key's low half
    top_k_into(score, n, k, out);
    std::sort(out, out + b);
    return b;
  }
  SelectionScratch& sc = selection_scratch();
  uint64_t* kept = room(sc.keys, static_cast<size_t>(n) + 16);
  int64_t w = -1;  // kept keys, in increasing index order
  if (n >= 8192 && b <= n / 4) {
    const int64_t rank = sample_rank(b, n);
    if (rank >= 0) {
      uint32_t sample[kSelectionSample];
      for (int64_t j = 0; j < kSelectionSample; ++j) sample[j] = score_key(score[j * n / kSelectionSample]);
      w = collect(score, n, sample_bound(sample, kSelectionSample, rank, sc.hist.data()), kept);
      if (w < b) w = -1;  // the sample missed: every row
    }
  }
  if (w < 0) {
    for (int64_t i = 0; i < n; ++i) kept[i] = selection_key(score[i], i);
    w = n;
  }
  const uint64_t last = b < w ? kth_smallest(kept, w, b, sc) : UINT64_MAX;
  int64_t c = 0;
  for (int64_t i = 0; i < w; ++i)
    if (kept[i] <= last) out[c++] = static_cast<int64_t>(kept[i] & 0xffffffffu);
  return c;
}

std::vector<int64_t> rank_all(const float* score, int64_t n) { return top_k(score, n, n); }

}  // namespace kvtool::scoring
