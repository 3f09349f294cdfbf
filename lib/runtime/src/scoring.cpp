#include "kvtool/scoring.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>

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

namespace {

// A key whose ascending order is the selection order (score descending, then id ascending): the
// float's bits mapped to an unsigned value of the same order (negatives flipped, -0 folded into
// +0 since they compare equal), complemented so that larger scores come first, with the id in the
// low half. Sorting plain integers avoids the indirect comparator's cache misses.
uint64_t selection_key(float s, int64_t id) {
  if (s == 0) s = 0;
  uint32_t b;
  std::memcpy(&b, &s, sizeof b);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(~b) << 32) | static_cast<uint32_t>(id);
}

// Moves the b smallest of `keys` (distinct) to the front, in any order, 0 < b < keys.size(): a
// histogram of the keys over their actual range finds the bucket that holds the b-th smallest,
// then only that bucket's keys are selected among. A plain nth_element over all n was most of
// eval's selector time at 32K rows (lib/offline/src/eval.cpp queries every row's receipt).
void select_smallest(std::vector<uint64_t>& keys, int64_t b) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t k : keys) {
    lo = std::min(lo, k);
    hi = std::max(hi, k);
  }
  constexpr uint64_t kBuckets = 2048;
  int shift = 0;
  while (((hi - lo) >> shift) >= kBuckets) ++shift;
  std::array<int64_t, kBuckets> count{};
  for (uint64_t k : keys) ++count[(k - lo) >> shift];
  int64_t below = 0;
  uint64_t t = 0;
  while (below + count[t] < b) below += count[t++];
  // Branch-free compaction: the keys of the buckets below t, then bucket t's (each store lands
  // in a slot that is either kept or overwritten by the next key of that kind).
  std::vector<uint64_t> low(static_cast<size_t>(below) + 1), tied(static_cast<size_t>(count[t]) + 1);
  size_t w = 0, e = 0;
  for (uint64_t k : keys) {
    const uint64_t bucket = (k - lo) >> shift;
    low[w] = k;
    w += bucket < t;
    tied[e] = k;
    e += bucket == t;
  }
  const auto need = static_cast<std::ptrdiff_t>(b - below);
  std::nth_element(tied.begin(), tied.begin() + need, tied.begin() + static_cast<std::ptrdiff_t>(e));
  std::copy(low.begin(), low.begin() + static_cast<std::ptrdiff_t>(w), keys.begin());
  std::copy(tied.begin(), tied.begin() + need, keys.begin() + static_cast<std::ptrdiff_t>(w));
}

}  // namespace

std::vector<int64_t> top_k(const float* score, int64_t n, int64_t k) {
  const int64_t b = std::max<int64_t>(0, std::min(k, n));
  std::vector<int64_t> order(static_cast<size_t>(b));
  if (n > int64_t{UINT32_MAX}) {  // ids do not fit the key's low half: the comparator path
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    auto better = [&](int64_t a, int64_t c) { return score[a] > score[c] || (score[a] == score[c] && a < c); };
    std::partial_sort(all.begin(), all.begin() + b, all.end(), better);
    std::copy(all.begin(), all.begin() + b, order.begin());
    return order;
  }
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keys[i] = selection_key(score[i], i);
  // Select, then sort the b kept: O(n + b log b), where a heap of size b is O(n log b). The
  // order is total, so the answer is the same sequence as a full sort's first b.
  if (b > 0 && b < n) select_smallest(keys, b);
  std::sort(keys.begin(), keys.begin() + b);
  for (int64_t i = 0; i < b; ++i) order[i] = static_cast<int64_t>(keys[i] & 0xffffffffu);
  return order;
}

std::vector<int64_t> rank_all(const float* score, int64_t n) { return top_k(score, n, n); }

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

void simhash_codes(const float* q, int64_t d, const float* w, int64_t bits, int64_t tables, uint32_t* codes) {
  const int64_t cols = bits * tables;
  std::vector<float> s(static_cast<size_t>(cols), 0.f);
  for (int64_t j = 0; j < d; ++j) {
    const float qj = q[j];
    const float* wr = w + j * cols;
    for (int64_t c = 0; c < cols; ++c) s[c] += qj * wr[c];
  }
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
