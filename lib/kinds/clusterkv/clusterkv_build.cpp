// kind "clusterkv", offline half: cosine k-means of the keys of each part (FAISS), and append of
// decode windows as new generations of clusters (formats/kinds-v1.md, "clusterkv").
#include "clusterkv/clusterkv.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "common/cluster_build.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"
#include "kvtool/progress.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

const char* rule_name(CentroidRule r) { return r == CentroidRule::raw_mean ? "raw-mean" : "spherical"; }

int64_t cluster_count(const ClusterKvParams& p, int64_t n) {
  if (p.clusters > 0) return std::min(p.clusters, std::max<int64_t>(n, 1));
  return std::max<int64_t>(1, std::llround(static_cast<double>(n) / static_cast<double>(p.tokens_per_cluster)));
}

}  // namespace

CentroidRule parse_centroid_rule(const std::string& s) {
  if (s == "raw-mean") return CentroidRule::raw_mean;
  if (s == "spherical") return CentroidRule::spherical;
  KVT_THROW(USAGE, "--centroid must be raw-mean or spherical, got '" << s << "'");
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
  KVT_CHECK(p_.clusters > 0 || p_.tokens_per_cluster >= 1, USAGE, "--tokens-per-cluster must be >= 1");
  KVT_CHECK(p_.clusters >= 0 && p_.clusters < (int64_t{1} << 31), USAGE, "--clusters must be positive");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, USAGE, "--iters must be in 1..10000");
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
  add_clusters(s, in.keys + rb * in.head_dim, rb, n, cluster_count(p_, n), p_.iters, in.seed, p_.centroid);
  out.meta["generations"] = json::array({{{"index_generation", 1}, {"rows", {rb, rb + n}}, {"clusters", {0, s.clusters()}}}});
  cluster_sections(s, out.sections);
  return out;
}

json clusterkv_append(const std::string& artifact, const std::string& dump_path, const std::string& output, int64_t prefix,
                      int64_t window, int64_t window_clusters, const std::string& sign_key, bool quiet) {
  KVT_CHECK(window >= 1 && window_clusters >= 1 && window_clusters <= window, USAGE,
            "--window must be >= 1 and --window-clusters in 1..window");
  ArtifactReader old(artifact);
  old.verify_sections();
  KVT_CHECK(old.kind() == "clusterkv", USAGE, "'" << artifact << "' is a " << old.kind() << " artifact, not clusterkv");
  find_kind("clusterkv")->validate(old);
  DumpReader dump(dump_path);
  check_source(old.source(), dump, false);  // rows below the old coverage must be unchanged
  const int64_t P = prefix < 0 ? dump.info().committed_frontier : prefix;
  KVT_CHECK(P <= dump.info().committed_frontier, USAGE, "--prefix " << P << " is beyond the committed frontier");
  IndexedRows before = IndexedRows::of(old);
  const int64_t avail = P - before.local - before.end();
  const int64_t windows = avail > 0 ? avail / window : 0;
  KVT_CHECK(windows >= 1, USAGE,
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
        add_clusters(s, keys.data(), r0, window, window_clusters, iters,
              part_seed(seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(head), static_cast<uint64_t>(gen * 1000003 + wi)), rule);
      }
      npm["generations"].push_back({{"index_generation", gen}, {"rows", {before.end(), new_end}}, {"clusters", {c0, s.clusters()}}});
      std::vector<PartSection> secs;
      cluster_sections(s, secs);
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

}  // namespace kvtool
