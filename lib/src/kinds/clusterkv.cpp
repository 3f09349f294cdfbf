// kind "clusterkv": everything about ClusterKV artifacts lives here (build, append, validate, query).
#include "kvtool/clusterkv.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "kvtool/artifact.h"
#include "kvtool/device.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"
#include "kvtool/scoring.h"
#include "kvtool/progress.h"
#include "kvtool/source_binding.h"
#include "impl/cluster_set.h"

namespace kvtool {

namespace {

const char* rule_name(CentroidRule r) { return r == CentroidRule::raw_mean ? "raw-mean" : "spherical"; }

class ClusterKvSelector : public PartSelector {
 public:
  ClusterKvSelector(const ArtifactReader& r, int64_t layer, int64_t head) : rows_(IndexedRows::of(r)) {
    const json& pm = part_meta(r, layer, head);
    dense_ = pm.value("dense", false);
    n_ = pm["indexed_rows"];
    if (!dense_) set_ = ClusterSet::load(r, layer, head, r.source().geo.head_dim);
  }
  int64_t indexed_rows() const override { return n_; }
  void select(const SelectRequest& req, Selection& out) const override {
    if (dense_) {
      for (int64_t i = 0; i < n_; ++i) {
        out.ids.push_back(rows_.begin() + i);
        out.scores.push_back(0.f);
      }
      return;
    }
    std::vector<float> score(static_cast<size_t>(set_.clusters()));
    scoring::dot_scores(req.q, set_.centroids.data(), set_.clusters(), set_.d, score.data());
    take(score, req.budget, out);
  }
  bool select_device(const SelectRequest& req, const DevicePart& dp, Selection& out) const override {
    const DeviceSection* c = dp.find("ckv_centroids");
    if (dense_ || !c) return false;
    std::vector<float> score(static_cast<size_t>(set_.clusters()));
    dp.dev->dot_scores(static_cast<const float*>(c->ptr), set_.clusters(), set_.d, req.q, score.data());
    take(score, req.budget, out);
    return true;
  }
  // Whole clusters best first (the last one cut) until the budget is spent.
  void take(const std::vector<float>& score, int64_t budget, Selection& out) const {
    // Full ranking of every cluster (the reference's 256-slot kernel breaks beyond 256 clusters).
    const std::vector<int64_t> order = scoring::rank_all(score.data(), set_.clusters());
    int64_t taken = 0;
    for (int64_t c : order) {
      if (taken >= budget) break;
      int64_t take = std::min<int64_t>(set_.sizes[c], budget - taken);  // the last cluster is cut
      const uint32_t* m = set_.members.data() + (set_.prefix[c] - set_.sizes[c]);
      for (int64_t i = 0; i < take; ++i) {
        out.ids.push_back(m[i]);
        out.scores.push_back(score[c]);
      }
      taken += take;
    }
  }
  json describe() const override { return {{"dense", dense_}, {"clusters", set_.clusters()}}; }
  int64_t resident_bytes() const override { return set_.resident_bytes(); }

 private:
  IndexedRows rows_;
  bool dense_ = false;
  int64_t n_ = 0;
  ClusterSet set_;
};

void validate_clusterkv(const ArtifactReader& r) {
  validate_part_list(r);
  IndexedRows rows = IndexedRows::of(r);
  const int64_t d = r.source().geo.head_dim;
  size_t sections = 0;
  for (const auto& pm : r.manifest()["kind_data"]["parts"]) {
    int64_t layer = pm["layer"], head = pm["kv_head"];
    KVT_CHECK(pm.contains("dense") && pm["dense"].is_boolean() && pm.contains("indexed_rows") &&
                  pm["indexed_rows"].is_number_unsigned() && pm.contains("generations") && pm["generations"].is_array(),
              "PART_INVALID", "clusterkv part (" << layer << ", " << head << ") lacks dense/indexed_rows/generations");
    KVT_CHECK(pm["indexed_rows"].get<int64_t>() == rows.count(), "PART_INVALID",
              "clusterkv part (" << layer << ", " << head << ") indexes " << pm["indexed_rows"] << " rows, the coverage has " << rows.count());
    if (pm["dense"].get<bool>()) {
      for (const char* n : {"ckv_centroids", "ckv_sizes", "ckv_prefix_sums", "ckv_members"})
        KVT_CHECK(!r.find(n, layer, head), "PART_INVALID", "dense clusterkv part (" << layer << ", " << head << ") has clusters");
      continue;
    }
    sections += 4;
    ClusterSet s = ClusterSet::load(r, layer, head, d);
    const int64_t C = s.clusters();
    uint64_t run = 0;
    for (int64_t c = 0; c < C; ++c) {
      run += s.sizes[c];
      KVT_CHECK(s.prefix[c] == run, "PREFIX_SUM_MISMATCH",
                "cluster " << c << " of part (" << layer << ", " << head << "): prefix sum " << s.prefix[c] << ", sizes add up to " << run);
    }
    KVT_CHECK(static_cast<int64_t>(s.members.size()) == rows.count() && run == s.members.size(), "MEMBERS_NOT_PARTITION",
              "part (" << layer << ", " << head << ") has " << s.members.size() << " members for " << rows.count() << " indexed rows");
    for (float x : s.centroids)
      KVT_CHECK(std::isfinite(x), "NON_FINITE", "a centroid of part (" << layer << ", " << head << ") is not finite");
    std::vector<char> seen(static_cast<size_t>(rows.count()), 0);
    // Generations: contiguous row windows and cluster ranges; members stay in their generation.
    int64_t next_row = rows.begin(), next_cluster = 0;
    for (const auto& g : pm["generations"]) {
      int64_t r0 = g["rows"][0], r1 = g["rows"][1], c0 = g["clusters"][0], c1 = g["clusters"][1];
      KVT_CHECK(r0 == next_row && r1 >= r0 && c0 == next_cluster && c1 >= c0 && c1 <= C, "GENERATIONS_NOT_CONTIGUOUS",
                "generations of part (" << layer << ", " << head << ") do not tile the rows and clusters");
      for (int64_t c = c0; c < c1; ++c) {
        const uint32_t* m = s.members.data() + (s.prefix[c] - s.sizes[c]);
        for (uint32_t i = 0; i < s.sizes[c]; ++i) {
          KVT_CHECK(m[i] >= r0 && m[i] < r1, "MEMBERS_NOT_PARTITION",
                    "cluster " << c << " of part (" << layer << ", " << head << ") holds row " << m[i]
                               << " outside its generation's rows [" << r0 << ", " << r1 << ")");
          KVT_CHECK(i == 0 || m[i] > m[i - 1], "MEMBERS_NOT_PARTITION", "members of cluster " << c << " are not in row order");
          KVT_CHECK(!seen[m[i] - rows.begin()], "MEMBERS_NOT_PARTITION", "row " << m[i] << " is a member twice");
          seen[m[i] - rows.begin()] = 1;
        }
      }
      next_row = r1;
      next_cluster = c1;
    }
    KVT_CHECK(next_row == rows.end() && next_cluster == C, "GENERATIONS_NOT_CONTIGUOUS",
              "generations of part (" << layer << ", " << head << ") end at row " << next_row << " / cluster " << next_cluster);
  }
  KVT_CHECK(sections == r.sections().size(), "PART_INVALID", "the artifact has sections that belong to no clusterkv part");
}

int64_t cluster_count(const ClusterKvParams& p, int64_t n) {
  if (p.clusters > 0) return std::min(p.clusters, std::max<int64_t>(n, 1));
  return std::max<int64_t>(1, std::llround(static_cast<double>(n) / static_cast<double>(p.tokens_per_cluster)));
}

}  // namespace

CentroidRule parse_centroid_rule(const std::string& s) {
  if (s == "raw-mean") return CentroidRule::raw_mean;
  if (s == "spherical") return CentroidRule::spherical;
  KVT_THROW("USAGE", "--centroid must be raw-mean or spherical, got '" << s << "'");
}

std::vector<int64_t> parse_layer_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t a, b;
    parse_layers(item, a, b);
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void cosine_kmeans(const float* rows, int64_t n, int64_t d, int64_t k, int64_t iters, uint64_t seed,
                   std::vector<int64_t>& labels, std::vector<float>& unit) {
  std::vector<float> x(rows, rows + n * d);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t t = 0; t < d; ++t) s += static_cast<double>(x[i * d + t]) * x[i * d + t];
    float inv = s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.f;
    for (int64_t t = 0; t < d; ++t) x[i * d + t] *= inv;
  }
  // FAISS runs iters - 1 full iterations; the last iteration's assignment is the final one below
  // and its update is the stored-centroid rule of ClusterSet::add, so the whole costs `iters`
  // iterations, like FAISS' own spherical k-means with niter = iters.
  faiss::ClusteringParameters cp;
  cp.niter = static_cast<int>(iters - 1);
  cp.spherical = true;
  cp.seed = static_cast<int>(seed & 0x7fffffff);
  cp.max_points_per_centroid = 1 << 30;  // train on every row, as the reference does
  cp.min_points_per_centroid = 1;
  cp.verbose = false;
  faiss::Clustering clus(static_cast<int>(d), static_cast<int>(k), cp);
  faiss::IndexFlatIP index(static_cast<faiss::Index::idx_t>(d));
  clus.train(n, x.data(), index);
  unit = clus.centroids;
  // Final assignment: argmax of normalized key · unit centroid.
  faiss::IndexFlatIP assign(static_cast<faiss::Index::idx_t>(d));
  assign.add(k, unit.data());
  std::vector<float> sim(static_cast<size_t>(n));
  labels.assign(static_cast<size_t>(n), 0);
  assign.search(n, x.data(), 1, sim.data(), reinterpret_cast<faiss::Index::idx_t*>(labels.data()));
}

json ClusterKvBuilder::params() const {
  return {{"tokens_per_cluster", p_.clusters > 0 ? json(nullptr) : json(p_.tokens_per_cluster)},
          {"clusters", p_.clusters > 0 ? json(p_.clusters) : json(nullptr)},
          {"iters", p_.iters},
          {"centroid", rule_name(p_.centroid)},
          {"dense_layers", p_.dense_layers},
          {"assignment", "cosine"}};
}

void ClusterKvBuilder::check(int64_t) const {
  KVT_CHECK(p_.clusters > 0 || p_.tokens_per_cluster >= 1, "USAGE", "--tokens-per-cluster must be >= 1");
  KVT_CHECK(p_.clusters >= 0 && p_.clusters < (int64_t{1} << 31), "USAGE", "--clusters must be positive");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, "USAGE", "--iters must be in 1..10000");
}

PartOutput ClusterKvBuilder::build_part(const PartInput& in) const {
  const int64_t rb = in.row_begin(), n = in.row_end() - rb;
  PartOutput out;
  bool dense = std::binary_search(p_.dense_layers.begin(), p_.dense_layers.end(), in.layer);
  out.meta = {{"indexed_rows", n}, {"dense", dense}};
  if (dense) {
    out.meta["generations"] = json::array();
    return out;
  }
  ClusterSet s;
  s.d = in.head_dim;
  s.add(in.keys + rb * in.head_dim, rb, n, cluster_count(p_, n), p_.iters, in.seed, p_.centroid);
  out.meta["generations"] = json::array({{{"index_generation", 1}, {"rows", {rb, rb + n}}, {"clusters", {0, s.clusters()}}}});
  s.to_sections(out.sections);
  return out;
}

json clusterkv_append(const std::string& artifact, const std::string& dump_path, const std::string& output, int64_t prefix,
                      int64_t window, int64_t window_clusters, const std::string& sign_key, bool quiet) {
  KVT_CHECK(window >= 1 && window_clusters >= 1 && window_clusters <= window, "USAGE",
            "--window must be >= 1 and --window-clusters in 1..window");
  ArtifactReader old(artifact);
  old.verify_sections();
  KVT_CHECK(old.kind() == "clusterkv", "USAGE", "'" << artifact << "' is a " << old.kind() << " artifact, not clusterkv");
  validate_clusterkv(old);
  DumpReader dump(dump_path);
  check_source(old.source(), dump, false);  // rows below the old coverage must be unchanged
  const int64_t P = prefix < 0 ? dump.info().committed_frontier : prefix;
  KVT_CHECK(P <= dump.info().committed_frontier, "USAGE", "--prefix " << P << " is beyond the committed frontier");
  IndexedRows before = IndexedRows::of(old);
  const int64_t avail = P - before.local - before.end();
  const int64_t windows = avail > 0 ? avail / window : 0;
  KVT_CHECK(windows >= 1, "USAGE",
            "no sealed window: " << std::max<int64_t>(avail, 0) << " new rows past the indexed end " << before.end()
                                 << " (need --window " << window << ")");
  const int64_t new_end = before.end() + windows * window;
  const int64_t E = new_end + before.local;  // a partial window stays uncovered
  SourceBinding binding = bind_source(dump, E);
  const json& params = old.manifest()["params"];
  CentroidRule rule = parse_centroid_rule(params["centroid"]);
  const int64_t iters = params["iters"], d = old.source().geo.head_dim;
  const uint64_t seed = params["seed"];
  const int64_t gen = old.manifest()["index_generation"].get<int64_t>() + 1;
  std::unique_ptr<SigningKey> key;
  if (!sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(sign_key));
  ArtifactWriter w(output, params.value("zstd_level", 3));
  json parts = json::array();
  const json& old_parts = old.manifest()["kind_data"]["parts"];
  Progress progress("kvtool-clusterkv append", static_cast<int64_t>(old_parts.size()), quiet);
  std::vector<float> keys(static_cast<size_t>(window * d));
  for (const auto& pm : old_parts) {
    int64_t layer = pm["layer"], head = pm["kv_head"];
    json npm = pm;
    npm["indexed_rows"] = new_end - before.begin();
    if (!pm["dense"].get<bool>()) {
      ClusterSet s = ClusterSet::load(old, layer, head, d);
      int64_t c0 = s.clusters();
      for (int64_t wi = 0; wi < windows; ++wi) {
        int64_t r0 = before.end() + wi * window;
        dump.read_k(layer, head, r0, r0 + window, keys.data());
        s.add(keys.data(), r0, window, window_clusters, iters,
              part_seed(seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(head), static_cast<uint64_t>(gen * 1000003 + wi)), rule);
      }
      npm["generations"].push_back({{"index_generation", gen}, {"rows", {before.end(), new_end}}, {"clusters", {c0, s.clusters()}}});
      std::vector<PartSection> secs;
      s.to_sections(secs);
      for (const auto& sec : secs) w.add_section(sec.name, sec.dtype, sec.shape, sec.bytes.data(), sec.bytes.size(), layer, head);
    }
    parts.push_back(npm);
    progress.advance();
  }
  progress.finish();
  ManifestCore core;
  core.kind = "clusterkv";
  core.params = params;
  core.source = binding;
  core.index_generation = gen;
  core.selector_generation = old.manifest()["selector_generation"];
  core.kind_data = old.manifest()["kind_data"];
  core.kind_data["parts"] = parts;
  json gens = core.kind_data.value("generations", json::array({{{"index_generation", 1}, {"rows", {before.begin(), before.end()}}}}));
  json wins = json::array();
  for (int64_t wi = 0; wi < windows; ++wi) wins.push_back({before.end() + wi * window, before.end() + (wi + 1) * window});
  gens.push_back({{"index_generation", gen}, {"rows", {before.end(), new_end}}, {"windows", wins}, {"window", window},
                  {"window_clusters", window_clusters}});
  core.kind_data["generations"] = gens;
  Digest md = w.finish(core, key.get());
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", output}, {"index_generation", gen},
          {"windows", windows}, {"coverage", {0, E}}, {"uncovered_rows", P - E}, {"manifest_sha256", to_hex(md)}};
}

KindInfo kinds::clusterkv_kind() {
  return {"clusterkv", "ClusterKV cosine clusters of keys", validate_clusterkv,
          [](const ArtifactReader& r, int64_t layer, int64_t head) -> std::unique_ptr<PartSelector> {
            return std::make_unique<ClusterKvSelector>(r, layer, head);
          }};
}

}  // namespace kvtool
