// kind "clusterkv", runtime half: structural validation, the part selector (raw q·centroid
// ranking, whole clusters to the budget) and its device path, and the kind's registration
// (formats/kinds-v1.md, "clusterkv").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/cluster_set.h"
#include "common/device_batch.h"
#include "kvtool/artifact.h"
#include "kvtool/device.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/scoring.h"

namespace kvtool {

namespace {

class ClusterKvSelector : public PartSelector {
 public:
  ClusterKvSelector(const ArtifactReader& r, int64_t layer, int64_t head) : rows_(IndexedRows::of(r)) {
    const json& pm = part_meta(r, layer, head);
    dense_ = pm.value("dense", false);
    n_ = int_member(pm, "indexed_rows", "clusterkv part");
    if (!dense_)
      set_ = ClusterSet::load(r, layer, head, r.source().geo.head_dim, "ckv",
                              stored_float_dtype(r.manifest()["params"], "centroid_dtype", true));
  }
  int64_t indexed_rows() const override { return n_; }
  void select(const SelectRequest& req, Selection& out) const override {
    out.budget_rows = params_of<BudgetParams>(req).budget.rows(n_);
    if (dense_) {
      for (int64_t i = 0; i < n_; ++i) {
        out.ids.push_back(rows_.begin() + i);
        out.scores.push_back(0.f);
      }
      out.dense = true;
      return;
    }
    std::vector<float>& score = scratch().score;
    score.resize(static_cast<size_t>(set_.clusters()));
    scoring::dot_scores(req.q, set_.centroids.data(), set_.clusters(), set_.d, score.data());
    take(score.data(), out.budget_rows, out);
  }
  bool select_device(const SelectRequest& req, const DevicePart& dp, Selection& out) const override {
    const DeviceSection* c = dp.find("ckv_centroids");
    if (dense_ || !c) return false;
    std::vector<float>& score = scratch().score;
    score.resize(static_cast<size_t>(set_.clusters()));
    out.budget_rows = params_of<BudgetParams>(req).budget.rows(n_);
    dp.dev->dot_scores(static_cast<const float*>(c->ptr), set_.clusters(), set_.d, req.q, score.data());
    take(score.data(), out.budget_rows, out);
    return true;
  }
  void reserve_device_batches(const DevicePart& dp, int64_t max_queries) const override {
    if (!dense_ && dp.find("ckv_centroids")) dp.dev->reserve_score_batches({max_queries, set_.d, set_.clusters(), 0});
  }
  // Every query's centroid scores in one device batch, then each query's ranking on the host.
  void select_device_batch(const DevicePart& dp, const DeviceQueries& qs, GroupAnswers& answers) const override {
    const DeviceSection* c = dp.find("ckv_centroids");
    if (dense_ || !c) return;
    const int64_t C = set_.clusters(), budget = params_of<BudgetParams>(qs.request(0)).budget.rows(n_);
    const int64_t capacity = dp.dev->score_batch_capacity({1, set_.d, C, 0});
    if (capacity <= 0) return;
    auto& s = DeviceBatchScratch<float>::of_this_thread();
    const float* q = qs.contiguous(s.q);
    float* score = s.out_for(capacity * C);
    run_device_batches(
        qs, capacity, answers, s,
        [&](int64_t first, int64_t count) {
          return dp.dev->dot_scores_batch(static_cast<const float*>(c->ptr), C, set_.d, q + first * qs.d, count,
                                          qs.stream, score);
        },
        [&](int64_t, int64_t i, Selection& sel) {
          sel.budget_rows = budget;
          take(score + i * C, budget, sel);
        });
  }
  // Whole clusters best first (the last one cut) until the budget is spent.
  void take(const float* score, int64_t budget, Selection& out) const {
    set_.take_best(score, budget, scratch().order, out);
  }
  // Per-thread buffers reused across queries (resize within capacity does not allocate).
  struct Scratch {
    std::vector<float> score;
    std::vector<int64_t> order;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  json describe() const override { return {{"dense", dense_}, {"clusters", set_.clusters()}}; }
  bool cluster_view(ClusterView& out) const override {
    if (dense_) return false;
    out = set_.view();
    return true;
  }
  int64_t resident_bytes() const override { return set_.resident_bytes(); }

 private:
  IndexedRows rows_;
  bool dense_ = false;
  int64_t n_ = 0;
  ClusterSet set_;
};

// One part's generations: contiguous row windows inside the indexed rows and cluster ranges;
// every member lies in its generation's rows, in row order, once.
void check_generations(const json& gens, const ClusterSet& s, const IndexedRows& rows, int64_t layer, int64_t head) {
  KVT_CHECK(gens.is_array(), BAD_MANIFEST, "clusterkv part (" << layer << ", " << head << ") generations is no list");
  std::vector<char> seen(static_cast<size_t>(rows.count()), 0);
  int64_t next_row = rows.begin(), next_cluster = 0;
  for (const auto& g : gens) {
    const json& gr = member(g, "rows", "generation");
    const json& gc = member(g, "clusters", "generation");
    const int64_t r0 = int_element(gr, 0, "rows"), r1 = int_element(gr, 1, "rows");
    const int64_t c0 = int_element(gc, 0, "clusters"), c1 = int_element(gc, 1, "clusters");
    KVT_CHECK(r0 == next_row && r1 >= r0 && r1 <= rows.end() && c0 == next_cluster && c1 >= c0 && c1 <= s.clusters(),
              GENERATIONS_NOT_CONTIGUOUS,
              "generations of part (" << layer << ", " << head << ") do not tile the rows and clusters");
    for (int64_t c = c0; c < c1; ++c) {
      const uint32_t* m = s.members.data() + (s.prefix[c] - s.sizes[c]);
      for (uint32_t i = 0; i < s.sizes[c]; ++i) {
        KVT_CHECK(m[i] >= r0 && m[i] < r1, MEMBERS_NOT_PARTITION,
                  "cluster " << c << " of part (" << layer << ", " << head << ") holds row " << m[i]
                             << " outside its generation's rows [" << r0 << ", " << r1 << ")");
        KVT_CHECK(i == 0 || m[i] > m[i - 1], MEMBERS_NOT_PARTITION,
                  "members of cluster " << c << " are not in row order");
        KVT_CHECK(!seen[m[i] - rows.begin()], MEMBERS_NOT_PARTITION, "row " << m[i] << " is a member twice");
        seen[m[i] - rows.begin()] = 1;
      }
    }
    next_row = r1;
    next_cluster = c1;
  }
  KVT_CHECK(
      next_row == rows.end() && next_cluster == s.clusters(), GENERATIONS_NOT_CONTIGUOUS,
      "generations of part (" << layer << ", " << head << ") end at row " << next_row << " / cluster " << next_cluster);
}

void validate_clusterkv(const ArtifactReader& r) {
  validate_part_list(r);
  IndexedRows rows = IndexedRows::of(r);
  const int64_t d = r.source().geo.head_dim;
  const std::string dtype = stored_float_dtype(r.manifest()["params"], "centroid_dtype", true);
  size_t sections = 0;
  for (const auto& pm : member(r.manifest()["kind_data"], "parts", "kind_data")) {
    const int64_t layer = int_member(pm, "layer", "part"), head = int_member(pm, "kv_head", "part");
    const json& dense = member(pm, "dense", "clusterkv part");
    KVT_CHECK(dense.is_boolean(), BAD_MANIFEST, "clusterkv part (" << layer << ", " << head << ") dense is no boolean");
    KVT_CHECK(int_member(pm, "indexed_rows", "clusterkv part") == rows.count(), PART_INVALID,
              "clusterkv part (" << layer << ", " << head << ") indexes " << pm["indexed_rows"]
                                 << " rows, the coverage has " << rows.count());
    if (dense.get<bool>()) {
      for (const char* n : {"ckv_centroids", "ckv_centroids_exp", "ckv_sizes", "ckv_prefix_sums", "ckv_members"})
        KVT_CHECK(!r.find(n, layer, head), PART_INVALID,
                  "dense clusterkv part (" << layer << ", " << head << ") has clusters");
      continue;
    }
    sections += dtype == "i8" ? 5 : 4;
    ClusterSet s = ClusterSet::load(r, layer, head, d, "ckv", dtype);
    uint64_t run = 0;
    for (int64_t c = 0; c < s.clusters(); ++c) {
      run += s.sizes[c];
      KVT_CHECK(s.prefix[c] == run, PREFIX_SUM_MISMATCH,
                "cluster " << c << " of part (" << layer << ", " << head << "): prefix sum " << s.prefix[c]
                           << ", sizes add up to " << run);
    }
    KVT_CHECK(static_cast<int64_t>(s.members.size()) == rows.count() && run == s.members.size(), MEMBERS_NOT_PARTITION,
              "part (" << layer << ", " << head << ") has " << s.members.size() << " members for " << rows.count()
                       << " indexed rows");
    for (float x : s.centroids)
      KVT_CHECK(std::isfinite(x), NON_FINITE, "a centroid of part (" << layer << ", " << head << ") is not finite");
    check_generations(member(pm, "generations", "clusterkv part"), s, rows, layer, head);
  }
  KVT_CHECK(sections == r.sections().size(), PART_INVALID,
            "the artifact has sections that belong to no clusterkv part");
}

}  // namespace

KindSpec kinds::clusterkv_kind() {
  KindSpec k =
      make_budget_kind_spec<ClusterKvSelector>("clusterkv", "ClusterKV cosine clusters of keys", validate_clusterkv);
  k.device_f32_sections = {"ckv_centroids"};
  return k;
}

}  // namespace kvtool
