// kind "pq", runtime half: structural validation, the part selector (LUT scoring, top-k) and its
// device path, and the kind's registration (formats/kinds-v1.md, "pq").
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <span>

#include "kvtool/artifact.h"
#include "common/device_batch.h"
#include "kvtool/device.h"
#include "kvtool/error.h"
#include "kvtool/fastscan.h"
#include "kvtool/kinds.h"
#include "kvtool/scoring.h"
#include "pq/pq_internal.h"
#include "pq/pq_row_groups.h"

namespace kvtool {

namespace {

using pq::code_dtype;
using pq::PqLayout;

class PqSelector : public PartSelector {
 public:
  PqSelector(const ArtifactReader& r, int64_t layer, int64_t head) : lay_(PqLayout::of(r)), rows_(IndexedRows::of(r)) {
    const json& pm = part_meta(r, layer, head);
    dense_ = pm.value("dense", false);
    n_ = int_member(pm, "indexed_rows", "pq part");
    if (dense_) return;
    // Transposed, [m, dsub, k]: pq_lut_t computes a subspace's k table entries side by side.
    std::vector<uint8_t> scratch;
    const std::vector<float> c = widen_float_section(
        r.section_view(require_section(r, "pq_centroids", layer, head), scratch), lay_.codebook_dtype);
    transpose(
        lay_.k, lay_.m * lay_.dsub,
        [&](int64_t c_, int64_t jt) { return c[((jt / lay_.dsub) * lay_.k + c_) * lay_.dsub + jt % lay_.dsub]; },
        centroids_t_);
    // Column-major (each subspace's codes contiguous) for the SIMD scorers; one byte per code
    // up to 8 bits. Read in place when the reader holds them (a pool's admission retained them).
    const std::span<const uint8_t> codes = r.section_view(require_section(r, "pq_codes", layer, head), scratch);
    const int64_t m = lay_.m;
    if (m == 2 && lay_.bits <= 8 && n_ <= int64_t{UINT32_MAX}) group_pairs(codes.data());  // sets by_pair_
    if (by_pair_) return;  // every row of one code pair scores the same: no codes kept
    if (scoring::fastscan_applies(lay_.bits, m, n_))
      scoring::fastscan_pack(codes.data(), n_, m, fast_);  // b = 4: the fast-scan layouts (kvtool/fastscan.h)
    else if (lay_.bits <= 8) {
      codes8_ = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(n_ * m));  // every byte written
      scoring::codes_to_column_major(codes.data(), n_, m, codes8_.get());
    } else {
      transpose(
          n_, m,
          [&](int64_t i, int64_t j) {
            return static_cast<uint16_t>(codes[2 * (i * m + j)] | (codes[2 * (i * m + j) + 1] << 8));
          },
          codes16_);
    }
  }
  // Row-major codes get(i, j), i < n, j < m, into column-major out[j * n + i], a block of rows at a
  // time: the block's rows stay in L1 while each subspace's part of it is written as one run.
  template <typename T, typename Get>
  static void transpose(int64_t n, int64_t m, const Get& get, std::vector<T>& out) {
    out.resize(static_cast<size_t>(n * m));
    constexpr int64_t kBlock = 256;
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t i1 = std::min(n, i0 + kBlock);
      for (int64_t j = 0; j < m; ++j) {
        T* dst = out.data() + j * n;
        for (int64_t i = i0; i < i1; ++i) dst[i] = get(i, j);
      }
    }
  }
  // m = 2, b <= 8: the rows grouped by their code pair (c0 << b | c1), a group for every pair key;
  // a query scores every pair once (pair_scores) and lists the rows of the best.
  void group_pairs(const uint8_t* codes) {
    // Scoring pairs instead of rows pays while pairs are fewer than rows by enough to cover
    // listing the kept pairs' rows: tests/bench/bench_pairs.cpp measures the break-even near 1.6
    // rows a pair (b 7 and 8, 32K and 128K rows; docs/reports/performance.md). Speed only: both paths give
    // the same answer bit for bit.
    std::vector<uint32_t> pair(static_cast<size_t>(n_)), distinct;
    std::vector<uint8_t> seen(size_t{1} << (2 * lay_.bits), 0);
    int64_t count = 0;
    for (int64_t i = 0; i < n_; ++i) {
      pair[i] = static_cast<uint32_t>(codes[2 * i] << lay_.bits | codes[2 * i + 1]);
      count += seen[pair[i]] == 0;
      seen[pair[i]] = 1;
    }
    // The pair table holds every key (2^(2b) of them): no more than the part's rows, so that its
    // additions never outnumber the rows path's scores (each of those two table lookups) and the
    // groups never outnumber the rows (the selection's buffers are sized by rows).
    const int64_t keys = int64_t{1} << (2 * lay_.bits);
    if (count * kRowsPerPair > n_ || keys > n_) return;
    // A group for every pair key, empty or not: a query's table of pair scores (pair_scores) is
    // then the groups' scores as it stands, with no lookup per distinct pair.
    scoring::group_rows(pair.data(), n_, keys, pairs_, distinct, true);
    by_pair_ = true;
    for (int64_t p = 0; p < pairs_.groups(); ++p)
      if (pairs_.start[p + 1] == pairs_.start[p]) empty_pairs_.push_back(static_cast<uint16_t>(p));
  }
  int64_t indexed_rows() const override { return n_; }
  void select(const SelectRequest& req, Selection& out) const override {
    const float* q = req.q;
    const BudgetParams& params = params_of<BudgetParams>(req);
    const int64_t budget = out.budget_rows = params.budget.rows(n_);
    std::vector<int64_t>& ids = out.ids;
    std::vector<float>& scores = out.scores;
    const int64_t base = rows_.begin();
    if (dense_) {
      for (int64_t i = 0; i < n_; ++i) {
        ids.push_back(base + i);
        scores.push_back(0.f);
      }
      out.dense = true;
      return;
    }
    // Per-thread and reused (no allocation once a thread has answered a part this size): the
    // lookup table [m, 2^b] of q_sub · centroid (inner product, as the reference scores), the
    // n scores and the selection, each written before it is read.
    thread_local Scratch sc;
    sc.rows = params.row_order && params.top_p <= 0;  // top_p cuts a best-first list (SelectorSet::query)
    if (fast_.n > 0) return fast_best(q, budget, sc, out);
    score_group(&q, 1, sc);
    sc.best(budget, 0, out);
  }
  // The batch's queries of this part (the query heads of one kv head, GQA) a few at a time, each
  // few scored in one pass over the codes; the same answers as select() one by one.
  void select_batch(const DeviceQueries& qs, GroupAnswers& answers) const override {
    if (dense_) return;  // select() lists every row
    const BudgetParams& params = params_of<BudgetParams>(qs.request(0));
    const int64_t budget = params.budget.rows(n_);
    thread_local Scratch sc;
    sc.rows = params.row_order;  // batches take no top_p
    thread_local Selection sel;  // cleared, never shrunk
    sel.ids.reserve(static_cast<size_t>(n_));
    sel.scores.reserve(static_cast<size_t>(n_));
    if (fast_.n > 0) {  // b = 4: the fast scan answers one query at a time
      for (int64_t j = 0; j < qs.count; ++j) {
        sel.clear();
        sel.budget_rows = budget;
        fast_best(qs.q(j), budget, sc, sel);
        answers.put(j, sel);
      }
      return;
    }
    if (by_pair_) pairs_.prefetch();  // the kv head's queries list rows of the pairs they keep
    for (int64_t j0 = 0; j0 < qs.count; j0 += kGroup) {
      const int64_t g = std::min(kGroup, qs.count - j0);
      const float* q[kGroup];
      for (int64_t j = 0; j < g; ++j) q[j] = qs.q(j0 + j);
      score_group(q, g, sc);
      for (int64_t j = 0; j < g; ++j) {
        int64_t* ids;
        float* scores;
        if (answers.room(j0 + j, std::min(budget, n_), ids, scores)) {
          answers.finish(j0 + j, sc.best_into(budget, j, ids, scores));
          continue;
        }
        sel.clear();
        sel.budget_rows = budget;
        sc.best(budget, j, sel);
        answers.put(j0 + j, sel);
      }
    }
  }
  template <typename T>
  static void grow(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  }
  // The query heads a GQA model shares one kv head among (Llama-3-8B: 4): scored together.
  static constexpr int64_t kGroup = 4;
  // A part's rows are listed by code pair when its pairs average at least this many rows (above
  // the measured break-even of about 1.6, group_pairs).
  static constexpr int64_t kRowsPerPair = 2;
  // Per-thread and reused (no allocation once a thread has answered a part this size): the lookup
  // tables [g, m, 2^b] of q_sub · centroid (inner product, as the reference scores), the g x n
  // scores and the selection, each written before it is read.
  struct Scratch {
    std::vector<float> lut, score;
    std::vector<int64_t> top;
    // What score_group scored last: query j's scores at score[j * scored, (j + 1) * scored), one a
    // row, or one a code pair when `pairs` is set; rows are absolute from `base`.
    int64_t scored = 0, base = 0;
    const scoring::RowGroups* pairs = nullptr;
    bool rows = false;  // list the selection in increasing row order (QueryParams::row_order)
    // Query j's best `budget` rows (absolute ids, best first, ties by lower id; or in increasing
    // row order with `rows`) into caller buffers
    // of min(budget, n) entries (scores: nullptr for none); returns the count written.
    int64_t best_into(int64_t budget, int64_t j, int64_t* ids, float* scores) {
      const float* s = score.data() + j * scored;
      if (pairs)
        return rows ? scoring::top_k_groups_rows_into(s, *pairs, budget, base, ids, scores)
                    : scoring::top_k_groups_into(s, *pairs, budget, base, ids, scores);
      const int64_t kept = rows ? scoring::top_k_rows_into(s, scored, budget, ids)
                                : scoring::top_k_into(s, scored, budget, ids);  // row indices, then made absolute
      if (scores)
        for (int64_t r = 0; r < kept; ++r) scores[r] = s[ids[r]];
      for (int64_t r = 0; r < kept; ++r) ids[r] += base;
      return kept;
    }
    // The same appended to out.
    void best(int64_t budget, int64_t j, Selection& out) {
      const int64_t n = pairs ? pairs->n : scored;
      const size_t at = out.ids.size(), most = static_cast<size_t>(std::min(budget, n));
      out.ids.resize(at + most);
      out.scores.resize(at + most);
      const int64_t kept = best_into(budget, j, out.ids.data() + at, out.scores.data() + at);
      out.ids.resize(at + static_cast<size_t>(kept));
      out.scores.resize(at + static_cast<size_t>(kept));
    }
  };
  // b = 4: the best `budget` rows by the fast scan (the float path's ids and scores, bit for bit).
  void fast_best(const float* q, int64_t budget, Scratch& sc, Selection& out) const {
    grow(sc.lut, lay_.m * lay_.k);
    grow(sc.score, n_);
    grow(sc.top, std::min(budget, n_));
    scoring::pq_lut_t(q, centroids_t_.data(), lay_.m, lay_.k, lay_.dsub, sc.lut.data());
    const int64_t kept = scoring::fastscan_top_k(sc.lut.data(), fast_, budget, sc.top.data(), sc.score.data());
    for (int64_t r = 0; r < kept; ++r) {
      out.ids.push_back(rows_.begin() + sc.top[r]);
      out.scores.push_back(sc.score[r]);
    }
  }
  // The scores of g <= kGroup queries in one pass over the codes (or the code pairs).
  void score_group(const float* const* q, int64_t g, Scratch& sc) const {
    const int64_t t = lay_.m * lay_.k;
    sc.scored = by_pair_ ? pairs_.groups() : n_;
    sc.base = rows_.begin();
    sc.pairs = by_pair_ ? &pairs_ : nullptr;
    grow(sc.lut, kGroup * t);
    grow(sc.score, kGroup * sc.scored);
    for (int64_t j = 0; j < g; ++j)
      scoring::pq_lut_t(q[j], centroids_t_.data(), lay_.m, lay_.k, lay_.dsub, sc.lut.data() + j * t);
    if (by_pair_)
      for (int64_t j = 0; j < g; ++j) {
        float* s = sc.score.data() + j * sc.scored;
        scoring::pair_scores(sc.lut.data() + j * t, lay_.k, s);
        // A pair no row has lists nothing whatever it scores: at -inf the selection's collecting
        // passes leave it out instead of sorting and cutting it with the rest (the answer is the same).
        for (const uint16_t e : empty_pairs_) s[e] = -std::numeric_limits<float>::infinity();
      }
    else if (lay_.bits <= 8)
      scoring::pq_scores_cm_group_u8(sc.lut.data(), g, codes8_.get(), n_, lay_.m, lay_.k, sc.score.data());
    else
      scoring::pq_scores_cm_group_u16(sc.lut.data(), g, codes16_.data(), n_, lay_.m, lay_.k, sc.score.data());
  }
  bool select_device(const SelectRequest& req, const DevicePart& dp, Selection& out) const override {
    ProductCodes p;
    if (!device_codes(dp, p)) return false;
    std::vector<int64_t> ids;
    out.budget_rows = params_of<BudgetParams>(req).budget.rows(n_);
    dp.dev->product_code_top_k(p, req.q, out.budget_rows, ids, out.scores);
    for (int64_t i : ids) out.ids.push_back(rows_.begin() + i);
    return true;
  }
  void reserve_device_batches(const DevicePart& dp, int64_t max_queries) const override {
    if (dense_ || !dp.find("pq_centroids") || !dp.find("pq_codes")) return;
    dp.dev->reserve_pq_batches(
        {max_queries, n_, lay_.m, lay_.k, lay_.m * lay_.dsub, std::min<int64_t>(n_, kMaxDeviceTop)});
  }
  void select_device_batch(const DevicePart& dp, const DeviceQueries& qs, GroupAnswers& answers) const override {
    ProductCodes p;
    if (!device_codes(dp, p)) return;
    const int64_t budget = params_of<BudgetParams>(qs.request(0)).budget.rows(n_), per = std::min(budget, n_);
    if (per <= 0) return;
    auto& s = DeviceBatchScratch<int64_t>::of_this_thread();
    thread_local std::vector<float> scores;
    const float* q = qs.contiguous(s.q);
    const int64_t capacity = dp.dev->pq_batch_capacity(p, per), base = rows_.begin();
    if (capacity <= 0) return;
    int64_t* ids = s.out_for(capacity * per);
    grow(scores, capacity * per);
    run_device_batches(
        qs, capacity, answers, s,
        [&](int64_t first, int64_t count) {
          return dp.dev->product_code_top_k_batch(p, q + first * qs.d, count, per, qs.stream, ids, scores.data());
        },
        [&](int64_t, int64_t i, Selection& sel) {
          sel.budget_rows = budget;
          for (int64_t r = i * per; r < (i + 1) * per; ++r) {
            sel.ids.push_back(base + ids[r]);
            sel.scores.push_back(scores[static_cast<size_t>(r)]);
          }
        });
  }
  bool device_pq_selection(const DevicePart& dp, const QueryParams& params, ProductCodes& codes, int64_t& top,
                           int64_t& row_base) const override {
    if (!device_codes(dp, codes)) return false;
    SelectRequest req;
    req.params = &params;
    top = params_of<BudgetParams>(req).budget.rows(n_);
    row_base = rows_.begin();
    return true;
  }
  json describe() const override { return {{"dense", dense_}}; }
  int64_t resident_bytes() const override {
    return vector_bytes(centroids_t_) + (codes8_ ? n_ * lay_.m : 0) + vector_bytes(codes16_) + fast_.bytes() +
           pairs_.bytes() + vector_bytes(empty_pairs_);
  }

 private:
  // The part's codes in the device tier (none for a dense part).
  bool device_codes(const DevicePart& dp, ProductCodes& p) const {
    const DeviceSection* c = dp.find("pq_centroids");
    const DeviceSection* k = dp.find("pq_codes");
    if (dense_ || !c || !k) return false;
    p = {c->ptr, k->ptr, lay_.m, lay_.k, lay_.dsub, n_, k->dtype == "u8" ? 1 : 2};
    return true;
  }
  PqLayout lay_;
  IndexedRows rows_;
  bool dense_ = false, by_pair_ = false;
  int64_t n_ = 0;
  std::vector<float> centroids_t_;     // [m, dsub, k] (the artifact's [m, k, dsub] transposed)
  std::unique_ptr<uint8_t[]> codes8_;  // [m, n] column-major, bits <= 8 (not zero-filled first)
  std::vector<uint16_t> codes16_;      // [m, n] column-major, bits > 8
  scoring::FastScanCodes fast_;        // bits == 4 and m != 2 (then codes8_ stays empty)
  scoring::RowGroups pairs_;           // m == 2, bits <= 8: the rows by code pair (then no codes8_)
  std::vector<uint16_t> empty_pairs_;  // the pair keys no row has (2^(2b) <= 65,536 keys)
};

// The index of the first of `count` codes (u8, or u16 little-endian above 8 bits) that is not
// below 2^bits, or -1. Every u8 is below 2^8 and every u16 below 2^16; otherwise a branch-free maximum (vectorized)
// over the codes finds whether there is one before the search for it.
int64_t first_code_out_of_range(std::span<const uint8_t> kb, int64_t count, int64_t bits) {
  if (bits == 8 || bits == 16) return -1;
  const auto code = [&](int64_t i) { return bits < 8 ? kb[i] : (kb[2 * i] | (kb[2 * i + 1] << 8)); };
  int max = 0;
  if (bits < 8)
    for (int64_t i = 0; i < count; ++i) max = std::max<int>(max, kb[i]);
  else
    for (int64_t i = 0; i < count; ++i) max = std::max(max, code(i));
  if (max < (1 << bits)) return -1;
  for (int64_t i = 0;; ++i)
    if (code(i) >= (1 << bits)) return i;
}

void validate_pq(const ArtifactReader& r) {
  validate_part_list(r);
  PqLayout lay = PqLayout::of(r);
  IndexedRows rows = IndexedRows::of(r);
  size_t sections_seen = 0;
  for (const auto& pm : r.manifest()["kind_data"]["parts"]) {
    const int64_t layer = int_member(pm, "layer", "part"), head = int_member(pm, "kv_head", "part");
    KVT_CHECK(pm.contains("dense") && pm["dense"].is_boolean(), PART_INVALID,
              "pq part (" << layer << ", " << head << ") lacks dense");
    const int64_t n = int_member(pm, "indexed_rows", "pq part");
    KVT_CHECK(
        n == rows.count(), PART_INVALID,
        "pq part (" << layer << ", " << head << ") indexes " << n << " rows but the coverage has " << rows.count());
    const SectionEntry* c = r.find("pq_centroids", layer, head);
    const SectionEntry* k = r.find("pq_codes", layer, head);
    if (pm["dense"].get<bool>()) {
      KVT_CHECK(!c && !k, PART_INVALID, "dense pq part (" << layer << ", " << head << ") must have no codebook");
      continue;
    }
    KVT_CHECK(c && k, PART_INVALID, "pq part (" << layer << ", " << head << ") lacks its centroids or codes");
    sections_seen += 2;
    KVT_CHECK(c->dtype == lay.codebook_dtype && c->shape == std::vector<int64_t>({lay.m, lay.k, lay.dsub}),
              SHAPE_MISMATCH,
              "pq_centroids of (" << layer << ", " << head << ") must be " << lay.codebook_dtype << " [" << lay.m
                                  << ", " << lay.k << ", " << lay.dsub << "]");
    KVT_CHECK(k->dtype == code_dtype(lay.bits) && k->shape == std::vector<int64_t>({n, lay.m}), SHAPE_MISMATCH,
              "pq_codes of (" << layer << ", " << head << ") must be " << code_dtype(lay.bits) << " [" << n << ", "
                              << lay.m << "]");
    std::vector<uint8_t> scratch;
    for (float x : widen_float_section(r.section_view(*c, scratch), lay.codebook_dtype))
      KVT_CHECK(std::isfinite(x), NON_FINITE, "pq_centroids of (" << layer << ", " << head << ") hold NaN/Inf");
    const int64_t bad = first_code_out_of_range(r.section_view(*k, scratch), n * lay.m, lay.bits);
    if (bad >= 0) {
      const auto kb = r.section_view(*k, scratch);
      const int64_t code = lay.bits <= 8 ? kb[bad] : (kb[2 * bad] | (kb[2 * bad + 1] << 8));
      KVT_THROW(CODE_OUT_OF_RANGE, "pq code " << code << " of row " << rows.begin() + bad / lay.m << " in part ("
                                              << layer << ", " << head << ") is not below 2^" << lay.bits);
    }
  }
  KVT_CHECK(sections_seen == r.sections().size(), PART_INVALID, "the artifact has sections that belong to no pq part");
}

// What PqSelector holds beyond the pool's generic bound: with m = 2 and b <= 8, a part's rows
// grouped by code pair (a row id each: 16-bit up to 65,536 rows, 32-bit above, counted at 32; a
// 32-bit start per pair key, 2^(2b) + 1 of them, no more than the rows, and a 16-bit id per key
// no row has; the sample) in place of its codes.
int64_t pq_selector_extra_bytes(const ArtifactReader& r) {
  const PqLayout lay = PqLayout::of(r);
  if (lay.m != 2 || lay.bits > 8) return 0;
  int64_t extra = 0;
  for (const auto& pm : r.manifest()["kind_data"]["parts"]) {
    if (pm.value("dense", false)) continue;
    const int64_t n = int_member(pm, "indexed_rows", "pq part");
    extra += 4 * n + 6 * std::min(n, int64_t{1} << (2 * lay.bits)) + 4 + 4 * scoring::kSelectionSample;
  }
  return extra;
}

}  // namespace

KindSpec kinds::pq_kind() {
  KindSpec k = make_budget_kind_spec<PqSelector>("pq", "PQCache product quantization of keys", validate_pq);
  k.selector_extra_bytes = pq_selector_extra_bytes;
  k.device_f32_sections = {"pq_centroids"};
  return k;
}

}  // namespace kvtool
