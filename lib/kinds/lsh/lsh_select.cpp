// kind "lsh", runtime half: structural validation, the SimHash collision selector with inclusion
// probabilities and its device path, the projections every part is checked against, and the kind's
// registration (formats/kinds-v1.md, "lsh").
#include <algorithm>
#include <math.h>

#include <cmath>
#include <cstring>

#include "kvtool/artifact.h"
#include "common/device_batch.h"
#include "kvtool/device.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"
#include "kvtool/scoring.h"
#include "lsh/lsh_internal.h"

namespace kvtool {

namespace {

using lsh::kProjectionStream;
using lsh::LshLayout;

template <typename T>
std::vector<T> as(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// One part's tables, resident: ids widened to u32 (still relative to their segment's base).
// Segment s's block of ids starts at L·(seg.lo − begin) and its offsets at row s·L.
struct LshTables {
  std::vector<float> mu, w;
  std::vector<uint32_t> offsets, ids;  // offsets [S·L, 2^K + 1], ids [L·n]
  std::vector<lsh::Segment> segs;
  static LshTables load(const ArtifactReader& r, int64_t layer, int64_t head, const LshLayout& lay,
                        const IndexedRows& rows) {
    auto get = [&](const char* name) {
      const SectionEntry* e = r.find(name, layer, head);
      KVT_CHECK(e, PART_INVALID, "lsh part (" << layer << ", " << head << ") lacks section " << name);
      return std::make_pair(e, r.read_section(*e));
    };
    LshTables t;
    t.segs = lsh::segments_of(rows.begin(), rows.end(), lay.segmented);
    const int64_t n = rows.count(), S = static_cast<int64_t>(t.segs.size());
    auto [me, mb] = get("lsh_mu");
    auto [we, wb] = get("lsh_projections");
    auto [oe, ob] = get("lsh_offsets");
    auto [ie, ib] = get("lsh_ids");
    KVT_CHECK(me->dtype == "f32" && me->shape == std::vector<int64_t>({lay.d}) && we->dtype == "f32" &&
                  we->shape == std::vector<int64_t>({lay.d, lay.bits * lay.tables}) && oe->dtype == "u32" &&
                  oe->shape == std::vector<int64_t>({S * lay.tables, lay.buckets + 1}) &&
                  (ie->dtype == "u16" || ie->dtype == "u32") && ie->shape == std::vector<int64_t>({lay.tables, n}),
              SHAPE_MISMATCH, "lsh sections of part (" << layer << ", " << head << ") have wrong dtypes or shapes");
    t.mu = as<float>(mb);
    t.w = as<float>(wb);
    t.offsets = as<uint32_t>(ob);
    if (ie->dtype == "u16") {
      auto v = as<uint16_t>(ib);
      t.ids.assign(v.begin(), v.end());
    } else {
      t.ids = as<uint32_t>(ib);
    }
    return t;
  }
  // Segment s's offsets and ids (element index into the ids section).
  const uint32_t* seg_offsets(size_t s, const LshLayout& lay) const {
    return offsets.data() + static_cast<int64_t>(s) * lay.tables * (lay.buckets + 1);
  }
  int64_t seg_ids(size_t s, int64_t begin, const LshLayout& lay) const { return lay.tables * (segs[s].lo - begin); }
};

// lsh's one query option: the collision threshold c (rows colliding with the query in >= c
// tables are sampled). bits/tables are recorded for eval summaries.
struct LshParams : QueryParams {
  int64_t min_collisions = 2, bits = 0, tables = 0;
  json receipt(int64_t) const override { return {{"min_collisions", min_collisions}}; }
  std::string label() const override { return "c=" + std::to_string(min_collisions); }
  json setting() const override { return {{"bits", bits}, {"tables", tables}, {"min_collisions", min_collisions}}; }
};

class LshSelector : public PartSelector {
 public:
  LshSelector(const ArtifactReader& r, int64_t layer, int64_t head)
      : lay_(LshLayout::of(r)), rows_(IndexedRows::of(r)) {
    const json& pm = part_meta(r, layer, head);
    n_ = int_member(pm, "indexed_rows", "lsh part");
    if (n_ > 0) t_ = LshTables::load(r, layer, head, lay_, rows_);
  }
  int64_t indexed_rows() const override { return n_; }
  void select(const SelectRequest& req, Selection& out) const override {
    check(req);
    if (n_ == 0) return;
    auto& [count, qcodes] = scratch(n_, lay_.tables);
    scoring::simhash_codes(req.q, lay_.d, t_.w.data(), lay_.bits, lay_.tables, qcodes.data());
    const int64_t rb = rows_.begin();
    for (size_t s = 0; s < t_.segs.size(); ++s) {
      const lsh::Segment& g = t_.segs[s];
      scoring::collision_counts(qcodes.data(), t_.seg_offsets(s, lay_), t_.ids.data() + t_.seg_ids(s, rb, lay_),
                                lay_.tables, lay_.buckets, g.hi - g.lo, g.lo - g.base, count.data() + (g.lo - rb));
    }
    emit(req, count.data(), out);
  }
  // The device primitive counts one CSR block at a time: one call per segment (the query's codes
  // are recomputed per call; they are a d·K·L product, small next to the tables).
  bool select_device(const SelectRequest& req, const DevicePart& dp, Selection& out) const override {
    const DeviceSection* w = dp.find("lsh_projections");
    const DeviceSection* off = dp.find("lsh_offsets");
    const DeviceSection* ids = dp.find("lsh_ids");
    if (n_ == 0 || !w || !off || !ids) return false;
    check(req);
    auto& [count, qcodes] = scratch(n_, lay_.tables);
    const int id_bytes = ids->dtype == "u16" ? 2 : 4;
    const int64_t rb = rows_.begin();
    for (size_t s = 0; s < t_.segs.size(); ++s) {
      const lsh::Segment& g = t_.segs[s];
      const uint32_t* seg_off = static_cast<const uint32_t*>(off->ptr) + (t_.seg_offsets(s, lay_) - t_.offsets.data());
      const void* seg_ids = static_cast<const uint8_t*>(ids->ptr) + t_.seg_ids(s, rb, lay_) * id_bytes;
      dp.dev->simhash_collisions(static_cast<const float*>(w->ptr), seg_off, seg_ids, id_bytes, lay_.d, lay_.bits,
                                 lay_.tables, g.hi - g.lo, g.lo - g.base, req.q, qcodes.data(),
                                 count.data() + (g.lo - rb));
    }
    emit(req, count.data(), out);
    return true;
  }
  void reserve_device_batches(const DevicePart& dp, int64_t max_queries) const override {
    if (n_ > 0 && dp.find("lsh_projections") && dp.find("lsh_offsets") && dp.find("lsh_ids"))
      dp.dev->reserve_score_batches({max_queries, lay_.d, n_, lay_.bits * lay_.tables});
  }
  // Every query's collision counts in one device batch per segment, then each query's rows (and
  // inclusion probabilities) on the host.
  void select_device_batch(const DevicePart& dp, const DeviceQueries& qs, GroupAnswers& answers) const override {
    const DeviceSection* w = dp.find("lsh_projections");
    const DeviceSection* off = dp.find("lsh_offsets");
    const DeviceSection* ids = dp.find("lsh_ids");
    if (n_ == 0 || !w || !off || !ids) return;
    check(qs.request(0));
    const int64_t capacity = dp.dev->score_batch_capacity({1, lay_.d, n_, lay_.bits * lay_.tables});
    if (capacity <= 0) return;
    auto& s = DeviceBatchScratch<uint16_t>::of_this_thread();
    const float* q = qs.contiguous(s.q);
    uint16_t* count = s.out_for(capacity * n_);
    const int id_bytes = ids->dtype == "u16" ? 2 : 4;
    const int64_t rb = rows_.begin();
    auto score = [&](int64_t first, int64_t batch) {
      std::fill(count, count + batch * n_, uint16_t{0});  // rows outside every segment collide nowhere
      for (size_t g = 0; g < t_.segs.size(); ++g) {
        const lsh::Segment& seg = t_.segs[g];
        const uint32_t* seg_off =
            static_cast<const uint32_t*>(off->ptr) + (t_.seg_offsets(g, lay_) - t_.offsets.data());
        const void* seg_ids = static_cast<const uint8_t*>(ids->ptr) + t_.seg_ids(g, rb, lay_) * id_bytes;
        if (!dp.dev->simhash_collisions_batch(static_cast<const float*>(w->ptr), seg_off, seg_ids, id_bytes, lay_.d,
                                              lay_.bits, lay_.tables, seg.hi - seg.lo, seg.lo - seg.base,
                                              q + first * qs.d, batch, qs.stream, count + (seg.lo - rb), n_))
          return false;
      }
      return true;
    };
    run_device_batches(qs, capacity, answers, s, score,
                       [&](int64_t j, int64_t i, Selection& sel) { emit(qs.request(j), count + i * n_, sel); });
  }
  // Per-thread buffers reused across queries: counts zeroed, codes written before they are read.
  static std::pair<std::vector<uint16_t>, std::vector<uint32_t>>& scratch(int64_t n, int64_t tables) {
    thread_local std::pair<std::vector<uint16_t>, std::vector<uint32_t>> s;
    s.first.assign(static_cast<size_t>(n), 0);
    s.second.resize(static_cast<size_t>(tables));
    return s;
  }
  void check(const SelectRequest& req) const {
    const int64_t c = params_of<LshParams>(req).min_collisions;
    KVT_CHECK(c >= 1 && c <= lay_.tables, USAGE, "min_collisions must be in 1.." << lay_.tables);
  }
  // Every row with >= c collisions, with its inclusion probability when the full keys are given.
  void emit(const SelectRequest& req, const uint16_t* count, Selection& out) const {
    const int64_t rb = rows_.begin(), c = params_of<LshParams>(req).min_collisions;
    double qn = 0;
    for (int64_t j = 0; j < lay_.d; ++j) qn += static_cast<double>(req.q[j]) * req.q[j];
    qn = std::sqrt(qn);
    for (int64_t i = 0; i < n_; ++i) {
      if (count[i] < c) continue;
      out.ids.push_back(rb + i);
      out.scores.push_back(static_cast<float>(count[i]));
      if (!req.keys) continue;  // a runtime without the key rows gets candidates only
      // Inclusion probability from the full (centered) key.
      const float* k = req.keys->row(rb + i);
      double dot = 0, kn = 0;
      for (int64_t j = 0; j < lay_.d; ++j) {
        double kc = static_cast<double>(k[j]) - t_.mu[j];
        dot += req.q[j] * kc;
        kn += kc * kc;
      }
      double cosv = qn > 0 && kn > 0 ? dot / (qn * std::sqrt(kn)) : 0.0;
      out.inclusion.push_back(lsh_inclusion_probability(cosv, lay_.bits, lay_.tables, c));
    }
  }
  json describe() const override { return {{"bits", lay_.bits}, {"tables", lay_.tables}}; }
  int64_t resident_bytes() const override {
    return vector_bytes(t_.mu) + vector_bytes(t_.w) + vector_bytes(t_.offsets) + vector_bytes(t_.ids);
  }

 private:
  LshLayout lay_;
  IndexedRows rows_;
  int64_t n_ = 0;
  LshTables t_;
};

// Rule 7 of formats/kinds-v1.md §5.4 for table `tb` of segment `s`: its CSR block runs from 0 to
// n_s, monotone, and lists each row of the segment once, ascending inside a bucket.
void check_segment_table(const LshTables& t, size_t s, int64_t tb, const LshLayout& lay, const IndexedRows& rows,
                         const std::string& part, std::vector<int64_t>& seen) {
  const lsh::Segment& g = t.segs[s];
  const int64_t ns = g.hi - g.lo, B = lay.buckets;
  const uint32_t* off = t.seg_offsets(s, lay) + tb * (B + 1);
  const uint32_t* ids = t.ids.data() + t.seg_ids(s, rows.begin(), lay) + tb * ns;
  KVT_CHECK(off[0] == 0 && off[B] == ns, BUCKET_TABLE_INVALID,
            "table " << tb << " of " << part << (t.segs.size() > 1 ? " segment " + std::to_string(s) : "")
                     << ": offsets run from " << off[0] << " to " << off[B] << ", not 0 to " << ns);
  for (int64_t b = 0; b < B; ++b) {
    // Bounded by n_s too: a bucket running past the block's ids would read the next table's.
    KVT_CHECK(off[b] <= off[b + 1] && off[b + 1] <= ns, BUCKET_TABLE_INVALID,
              "table " << tb << " offsets are not monotone within [0, " << ns << "] at bucket " << b);
    for (uint32_t i = off[b]; i < off[b + 1]; ++i) {
      const int64_t id = g.base + ids[i];
      KVT_CHECK(id >= g.lo && id < g.hi, BUCKET_TABLE_INVALID,
                "table " << tb << " holds row " << id << " outside the indexed rows");
      KVT_CHECK(seen[id - rows.begin()] != tb, BUCKET_TABLE_INVALID, "table " << tb << " holds row " << id << " twice");
      KVT_CHECK(i == off[b] || ids[i] > ids[i - 1], BUCKET_TABLE_INVALID,
                "bucket " << b << " of table " << tb << " is not sorted by id");
      seen[id - rows.begin()] = tb;
    }
  }
}

void validate_lsh_part(const ArtifactReader& r, int64_t layer, int64_t head, const LshLayout& lay,
                       const IndexedRows& rows, uint64_t seed) {
  LshTables t = LshTables::load(r, layer, head, lay, rows);
  const std::string want = lsh::id_dtype(rows.coverage_end, lay.segmented);
  KVT_CHECK(r.find("lsh_ids", layer, head)->dtype == want, SHAPE_MISMATCH,
            "lsh ids of part (" << layer << ", " << head << ") should be " << want);
  for (float x : t.mu)
    KVT_CHECK(std::isfinite(x), NON_FINITE, "the key mean of part (" << layer << ", " << head << ") is not finite");
  KVT_CHECK(
      t.w == lsh_projections(seed, layer, head, lay.d, lay.bits, lay.tables), PROJECTION_MISMATCH,
      "the projections of part (" << layer << ", " << head << ") are not the ones the seed " << seed << " generates");
  std::vector<int64_t> seen(static_cast<size_t>(rows.count()), -1);
  const std::string part = "part (" + std::to_string(layer) + ", " + std::to_string(head) + ")";
  for (size_t s = 0; s < t.segs.size(); ++s)
    for (int64_t tb = 0; tb < lay.tables; ++tb) check_segment_table(t, s, tb, lay, rows, part, seen);
}

void validate_lsh(const ArtifactReader& r) {
  validate_part_list(r);
  LshLayout lay = LshLayout::of(r);
  IndexedRows rows = IndexedRows::of(r);
  const json& seed_json = member(r.manifest()["params"], "seed", "params");
  KVT_CHECK(seed_json.is_number_unsigned(), BAD_MANIFEST, "params.seed is not a non-negative integer");
  const uint64_t seed = seed_json.get<uint64_t>();
  size_t sections = 0;
  for (const auto& pm : r.manifest()["kind_data"]["parts"]) {
    const int64_t layer = int_member(pm, "layer", "part"), head = int_member(pm, "kv_head", "part");
    KVT_CHECK(
        int_member(pm, "indexed_rows", "lsh part") == rows.count(), PART_INVALID,
        "lsh part (" << layer << ", " << head << ") does not index the " << rows.count() << " rows of its coverage");
    if (rows.count() == 0) continue;
    sections += 4;
    validate_lsh_part(r, layer, head, lay, rows, seed);
  }
  KVT_CHECK(sections == r.sections().size(), PART_INVALID, "the artifact has sections that belong to no lsh part");
}

json summarize_lsh(const ArtifactReader& r) {
  uint64_t raw = 0, stored = 0;
  for (const auto& s : r.sections())
    if (s.name == "lsh_offsets" || s.name == "lsh_ids") raw += s.raw_size, stored += s.stored_size;
  double empty = 0;
  int64_t max_bucket = 0, parts = 0;
  // inspect summarizes artifacts it has not validated: read only members of the expected types.
  const json parts_list = r.manifest().value("kind_data", json::object()).value("parts", json::array());
  for (const auto& pm : parts_list) {
    if (!pm.is_object() || !pm.value("bucket_empty_fraction", json()).is_number() ||
        !pm.value("bucket_max", json()).is_number_integer())
      continue;
    empty += pm["bucket_empty_fraction"].get<double>();
    max_bucket = std::max<int64_t>(max_bucket, pm["bucket_max"].get<int64_t>());
    ++parts;
  }
  return {{"table_bytes_raw", raw},
          {"table_bytes_stored", stored},
          {"bucket_empty_fraction_mean", parts ? empty / parts : 0.0},
          {"bucket_max", max_bucket}};
}

}  // namespace

std::vector<float> lsh_projections(uint64_t seed, int64_t layer, int64_t kv_head, int64_t d, int64_t bits,
                                   int64_t tables) {
  SplitMix64 g(part_seed(seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(kv_head), kProjectionStream));
  std::vector<float> w(static_cast<size_t>(d * bits * tables));
  for (auto& x : w) x = static_cast<float>(g.normal());
  return w;
}

// log Γ(x) without std::lgamma's write to the global signgam (a data race when batched queries
// run on several threads); the same value.
double log_gamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}

double lsh_inclusion_probability(double cosine, int64_t bits, int64_t tables, int64_t c) {
  double cs = std::max(-1.0, std::min(1.0, cosine));
  double p = 1.0 - std::acos(cs) / M_PI;
  double P = std::pow(p, static_cast<double>(bits));
  const double L = static_cast<double>(tables);
  if (P <= 0) return 0.0;
  if (P >= 1) return 1.0;
  if (c == 2) return 1.0 - std::pow(1.0 - P, L - 1) * (1.0 + (L - 1) * P);
  // 1 - sum_{j < c} C(L, j) P^j (1-P)^(L-j), each term in log space.
  double below = 0, lp = std::log(P), lq = std::log1p(-P);
  for (int64_t j = 0; j < c; ++j)
    below += std::exp(log_gamma(L + 1) - log_gamma(j + 1.0) - log_gamma(L - j + 1) + j * lp + (L - j) * lq);
  return std::max(0.0, 1.0 - below);
}

KindSpec kinds::lsh_kind() {
  KindSpec k =
      make_kind_spec<LshSelector>("lsh", "MagicPIG SimHash tables", SelectionMode::collision_sampling, validate_lsh);
  k.query_options = {{"min_collisions", "emit rows colliding with the query in at least c tables", "2"}};
  k.parse_query = [](const ArtifactReader& r, const QuerySettings& s) -> std::unique_ptr<QueryParams> {
    const KindSpec& self = *find_kind("lsh");
    check_query_settings(self, s);
    auto p = std::make_unique<LshParams>();
    p->min_collisions = parse_int_option("min_collisions", setting_or_default(self, s, "min_collisions"));
    const LshLayout lay = LshLayout::of(r);
    p->bits = lay.bits;
    p->tables = lay.tables;
    return p;
  };
  // Compare: thresholds from 1 (every row colliding once: the largest sample) up, doubling past 4,
  // within 1..tables (what the selector accepts).
  k.curve_sweep = [](const ArtifactReader& r, const std::string& option) {
    std::vector<std::string> v;
    if (option != "min_collisions") return v;
    const int64_t tables = LshLayout::of(r).tables;
    for (int64_t c : {1, 2, 3, 4, 8, 16})
      if (c <= tables) v.push_back(std::to_string(c));
    return v;
  };
  k.needs_keys = true;
  k.summarize = summarize_lsh;
  return k;
}

}  // namespace kvtool
