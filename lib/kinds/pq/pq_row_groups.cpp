#include "pq/pq_row_groups.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "selection_internal.h"

namespace kvtool::scoring {

using namespace detail;  // the internals this file shares (declared in its private header)

namespace {

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

// The score key T of the row ranked b-th (1-based) among the kept groups' rows, and `below`, the
// rows of groups whose key is below T: a histogram of the kept groups' score keys, each counted
// with its group's rows, narrowed into the bucket that holds rank b; its buckets number about the
// keys' count (at most 2^11), so that clearing and walking them costs less than the keys. A few
// keys left are sorted.
uint32_t weighted_cut(const uint64_t* kept, int64_t w, const RowGroups& g, int64_t b, int64_t& below,
                      SelectionScratch& sc) {
  const uint64_t* keys = kept;
  below = 0;
  uint32_t* count = sc.hist.data();
  for (int depth = 0;; ++depth) {
    if (w <= 48) {  // by score key (the group in the low half breaks no tie that matters here)
      uint64_t few[48];
      std::copy(keys, keys + w, few);
      std::sort(few, few + w);
      for (int64_t i = 0;; ++i) {
        const auto p = static_cast<uint32_t>(few[i]);
        const int64_t rows = g.start[p + 1] - g.start[p];
        const auto key = static_cast<uint32_t>(few[i] >> 32);
        int64_t run = rows;  // every group at this key
        for (int64_t j = i + 1; j < w && static_cast<uint32_t>(few[j] >> 32) == key; ++j)
          run += g.start[static_cast<uint32_t>(few[j]) + 1] - g.start[static_cast<uint32_t>(few[j])];
        if (below + run >= b) return key;
        below += run;
        while (i + 1 < w && static_cast<uint32_t>(few[i + 1] >> 32) == key) ++i;
      }
    }
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int64_t i = 0; i < w; ++i) {
      lo = std::min(lo, static_cast<uint32_t>(keys[i] >> 32));
      hi = std::max(hi, static_cast<uint32_t>(keys[i] >> 32));
    }
    if (lo == hi) return lo;
    const uint32_t buckets = std::min<uint32_t>(2048, std::bit_ceil(static_cast<uint32_t>(w)));
    int shift = 0;
    while (((hi - lo) >> shift) >= buckets) ++shift;
    std::fill(count, count + buckets, 0u);
    for (int64_t i = 0; i < w; ++i) {
      const auto p = static_cast<uint32_t>(keys[i]);
      count[(static_cast<uint32_t>(keys[i] >> 32) - lo) >> shift] += g.start[p + 1] - g.start[p];
    }
    uint32_t t = 0;
    while (below + count[t] < b) below += count[t++];
    if (shift == 0) return lo + t;
    uint64_t* tied = room(sc.tied[depth + 2], static_cast<size_t>(w));
    int64_t e = 0;
    for (int64_t i = 0; i < w; ++i) {
      tied[e] = keys[i];
      e += ((static_cast<uint32_t>(keys[i] >> 32) - lo) >> shift) == t;
    }
    keys = tied, w = e;
  }
}

// The bitmap of top_k_groups_rows_into, one bit a row, and each marked row's score; per thread.
struct RowMarks {
  std::vector<uint64_t> bits;
  std::vector<float> score;
};

}  // namespace

void RowGroups::prefetch() const {
  auto sweep = [](const void* data, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(data) + o, 0, 3);
  };
  sweep(start.data(), start.size() * sizeof(uint32_t));
  sweep(rows16.data(), rows16.size() * sizeof(uint16_t));
  sweep(rows32.data(), rows32.size() * sizeof(uint32_t));
}

void pair_scores(const float* lut, int64_t k, float* out) {
  const float* second = lut + k;
  for (int64_t c0 = 0; c0 < k; ++c0) {
    const float first = 0.f + lut[c0];  // as the scorers start from 0 (-0 becomes +0)
    float* row = out + c0 * k;
    for (int64_t c1 = 0; c1 < k; ++c1) row[c1] = first + second[c1];
  }
}

int64_t RowGroups::bytes() const {
  return static_cast<int64_t>((start.capacity() + rows32.capacity() + sample.capacity()) * sizeof(uint32_t) +
                              rows16.capacity() * sizeof(uint16_t));
}

void group_rows(const uint32_t* key, int64_t n, int64_t key_count, RowGroups& out, std::vector<uint32_t>& keys,
                bool every_key) {
  std::vector<uint32_t> group(static_cast<size_t>(key_count), 0);  // first a count per key
  for (int64_t i = 0; i < n; ++i) ++group[key[i]];
  const auto groups =
      every_key ? static_cast<size_t>(key_count)
                : static_cast<size_t>(std::count_if(group.begin(), group.end(), [](uint32_t c) { return c > 0; }));
  keys.resize(groups);
  out.n = n;
  out.start.assign(groups + 1, 0);  // exact sizes: bytes() counts capacity
  size_t p = 0;
  for (int64_t v = 0; v < key_count; ++v) {
    if (group[v] == 0 && !every_key) continue;
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

int64_t top_k_groups_rows_into(const float* score, const RowGroups& g, int64_t k, int64_t base, int64_t* ids,
                               float* scores) {
  const int64_t b = std::max<int64_t>(0, std::min(k, g.n));
  if (b == 0) return 0;
  SelectionScratch& sc = selection_scratch();
  thread_local RowMarks marks;
  const auto words = static_cast<size_t>((g.n + 63) / 64);
  if (marks.bits.size() < words) marks.bits.resize(words, 0);  // zero between calls: cleared as read
  if (marks.score.size() < static_cast<size_t>(g.n)) marks.score.resize(static_cast<size_t>(g.n));
  const auto groups = static_cast<size_t>(g.groups());
  uint64_t* kept = room(sc.keys, groups + 16);
  const int64_t w = collect_groups(score, g, b, kept, sc);
  int64_t below = 0;
  const uint32_t cut = weighted_cut(kept, w, g, b, below, sc);
  uint64_t* bits = marks.bits.data();
  float* row_score = marks.score.data();
  auto mark = [&](uint32_t row, float s) {
    bits[row >> 6] |= uint64_t{1} << (row & 63);
    row_score[row] = s;
  };
  uint64_t* tied = room(sc.tied[0], static_cast<size_t>(g.n));  // rows of the groups at the cut
  int64_t at_cut = 0;
  for (int64_t i = 0; i < w; ++i) {  // the groups below the cut: their rows' range, empty for the others
    const uint32_t key = static_cast<uint32_t>(kept[i] >> 32), p = static_cast<uint32_t>(kept[i]);
    const uint32_t first = g.start[p], end = key < cut ? g.start[p + 1] : first;
    for (uint32_t r = first; r < end; ++r) mark(g.row(r), score[p]);
  }
  for (int64_t i = 0; i < w; ++i) {  // the groups at the cut
    const uint32_t p = static_cast<uint32_t>(kept[i]);
    if (static_cast<uint32_t>(kept[i] >> 32) == cut)
      for (uint32_t r = g.start[p]; r < g.start[p + 1]; ++r) tied[at_cut++] = (uint64_t{g.row(r)} << 32) | p;
  }
  const int64_t need = b - below;  // the lowest rows of the groups at the cut (ties by lower row)
  if (need < at_cut) radix_sort(tied, at_cut, room(sc.low[0], static_cast<size_t>(g.n)), 32);
  for (int64_t r = 0; r < need; ++r) mark(static_cast<uint32_t>(tied[r] >> 32), score[static_cast<uint32_t>(tied[r])]);
  int64_t out = 0;
  for (size_t wd = 0; wd < words; ++wd) {
    for (uint64_t m = bits[wd]; m; m &= m - 1) {
      const auto row = static_cast<int64_t>(wd * 64 + static_cast<size_t>(std::countr_zero(m)));
      ids[out] = base + row;
      if (scores) scores[out] = row_score[row];
      ++out;
    }
    bits[wd] = 0;
  }
  return out;
}

}  // namespace kvtool::scoring
