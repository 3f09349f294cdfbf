// kind "clusterkv", offline half: cosine k-means of the keys of each part (flat or tree,
// common/kmeans.h), and append of
// decode windows as new generations of clusters (formats/kinds-v1.md, "clusterkv").
#include "clusterkv/clusterkv_builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "common/cluster_build.h"
#include "common/param_json.h"
#include "kvtool/append.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/prng.h"

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
  KVT_THROW(USAGE, "centroid must be raw-mean or spherical, got '" << s << "'");
}

int64_t clusterkv_default_clusters(int64_t n, int64_t d, const std::string& centroid_dtype) {
  const double i8_share = centroid_dtype == "i8" ? (2.0 * d + 8.0) / (d + 9.0) : 1.0;
  const auto c = std::llround(410.0 * std::cbrt(static_cast<double>(n) / 32768.0) * i8_share);
  return std::clamp<int64_t>(c, 1, std::max<int64_t>(n, 1));
}

std::unique_ptr<KindBuilder> ClusterKvBuilder::resolved(int64_t d, int64_t n) const {
  if (p_.clusters > 0 || p_.tokens_per_cluster > 0) return nullptr;
  ClusterKvParams p = p_;
  p.clusters = clusterkv_default_clusters(n, d, p_.centroid_dtype);
  return std::make_unique<ClusterKvBuilder>(p);
}

json ClusterKvBuilder::params() const {
  json j = {{"tokens_per_cluster", p_.clusters > 0 ? json(nullptr) : json(p_.tokens_per_cluster)},
            {"clusters", p_.clusters > 0 ? json(p_.clusters) : json(nullptr)},
            {"centroid", rule_name(p_.centroid)},
            {"assignment", "cosine"}};
#define KVTOOL_PARAM KVTOOL_MANIFEST_PARAM
#define KVTOOL_PARAM_TEXT KVTOOL_MANIFEST_TEXT_PARAM
#include "kvtool/kinds/clusterkv_params.def"
  if (p_.centroid_dtype != "f32") j["centroid_dtype"] = p_.centroid_dtype;  // absent: f32, as before it existed
  add_kmeans_params(j, p_.kmeans);
  return j;
}

void ClusterKvBuilder::check(int64_t) const {
  KVT_CHECK(p_.tokens_per_cluster >= 0, USAGE, "tokens_per_cluster must be >= 1");
  KVT_CHECK(p_.clusters >= 0 && p_.clusters < (int64_t{1} << 31), USAGE, "clusters must be positive");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, USAGE, "iters must be in 1..10000");
  KVT_CHECK(p_.centroid_dtype == "f32" || p_.centroid_dtype == "f16" || p_.centroid_dtype == "i8", USAGE,
            "centroid_dtype must be f32, f16 or i8, got '" << p_.centroid_dtype << "'");
  check_kmeans_options(p_.kmeans);
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
  const KmeansMethod used = add_clusters(s, in.keys + rb * in.head_dim, rb, n, cluster_count(p_, n), p_.iters, in.seed,
                                         p_.centroid, p_.kmeans);
  out.meta["kmeans"] = kmeans_method_name(used);
  out.meta["generations"] =
      json::array({{{"index_generation", 1}, {"rows", {rb, rb + n}}, {"clusters", {0, s.clusters()}}}});
  cluster_sections(s, out.sections, "ckv", p_.centroid_dtype);
  return out;
}

namespace {

// Append for clusterkv: each sealed window of new rows past the old indexed end is clustered on
// its own and its clusters are added to the part; a partial window stays uncovered until sealed.
class ClusterKvAppender : public KindAppender {
 public:
  ClusterKvAppender(int64_t window, int64_t window_clusters) : window_(window), window_clusters_(window_clusters) {}
  std::string kind() const override { return "clusterkv"; }

  AppendPlan plan(const ArtifactReader& old, int64_t prefix) override {
    P_ = prefix;
    before_ = IndexedRows::of(old);
    const int64_t avail = P_ - before_.local - before_.end();
    windows_ = avail > 0 ? avail / window_ : 0;
    KVT_CHECK(windows_ >= 1, USAGE,
              "no sealed window: " << std::max<int64_t>(avail, 0) << " new rows past the indexed end " << before_.end()
                                   << " (need window " << window_ << ")");
    new_end_ = before_.end() + windows_ * window_;
    E_ = new_end_ + before_.local;  // the local window stays outside the index
    const json& params = old.manifest()["params"];
    rule_ = parse_centroid_rule(params["centroid"]);
    dtype_ = stored_float_dtype(params, "centroid_dtype", true);
    iters_ = params["iters"];
    seed_ = params["seed"];
    return {E_, before_.end(), new_end_, new_end_ - before_.begin()};
  }

  void append_part(const AppendPartInput& in, PartOutput& out) override {
    ClusterSet s = ClusterSet::load(in.old, in.layer, in.kv_head, in.head_dim, "ckv", dtype_);
    const int64_t c0 = s.clusters();
    const auto layer = static_cast<uint64_t>(in.layer), head = static_cast<uint64_t>(in.kv_head);
    for (int64_t wi = 0; wi < windows_; ++wi) {
      const int64_t r0 = before_.end() + wi * window_;
      // Seeded per (layer, head, generation, window), so a window clusters the same in any run.
      const uint64_t seed = part_seed(seed_, layer, head, static_cast<uint64_t>(in.index_generation * 1000003 + wi));
      // A window is small (window_clusters <= window rows): flat k-means, as before the tree.
      add_clusters(s, in.rows + (r0 - in.rows_begin) * in.head_dim, r0, window_, window_clusters_, iters_, seed, rule_,
                   {KmeansMethod::flat});
    }
    out.meta["generations"].push_back({{"index_generation", in.index_generation},
                                       {"rows", {before_.end(), new_end_}},
                                       {"clusters", {c0, s.clusters()}}});
    cluster_sections(s, out.sections, "ckv", dtype_);
    keep_old_centroid_bytes(in.old, in.layer, in.kv_head, "ckv", out.sections);
  }

  json first_generation() const override {
    return {{"index_generation", 1}, {"rows", {before_.begin(), before_.end()}}};
  }
  json generation(int64_t gen) const override {
    json wins = json::array();
    for (int64_t wi = 0; wi < windows_; ++wi)
      wins.push_back({before_.end() + wi * window_, before_.end() + (wi + 1) * window_});
    return {{"index_generation", gen},
            {"rows", {before_.end(), new_end_}},
            {"windows", wins},
            {"window", window_},
            {"window_clusters", window_clusters_}};
  }

  // The kind's fields of the summary, after every part was appended.
  ClusterKvAppendSummary summary(AppendSummary s) const { return {std::move(s), windows_, P_ - E_}; }

 private:
  const int64_t window_, window_clusters_;
  int64_t P_ = 0, E_ = 0, windows_ = 0, new_end_ = 0, iters_ = 0;
  uint64_t seed_ = 0;
  CentroidRule rule_ = CentroidRule::raw_mean;
  std::string dtype_ = "f32";
  IndexedRows before_;
};

}  // namespace

ClusterKvAppendSummary clusterkv_append(const AppendOptions& o, int64_t window, int64_t window_clusters) {
  KVT_CHECK(window >= 1 && window_clusters >= 1 && window_clusters <= window, USAGE,
            "window must be >= 1 and window_clusters in 1..window");
  ClusterKvAppender appender(window, window_clusters);
  return appender.summary(append_generation(o, appender));
}

json ClusterKvAppendSummary::to_json() const {
  json j = append.to_json();
  j["windows"] = windows;
  j["uncovered_rows"] = uncovered_rows;
  return j;
}

}  // namespace kvtool
