// The balanced k-means tree (lib/kinds/common/kmeans.h) and its use by clusterkv and squeeze.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <faiss/Clustering.h>
#include <random>
#include <set>

#include "clusterkv/clusterkv_builder.h"
#include "common/kmeans.h"
#include "common/nearest_l2.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/kind_builders.h"
#include "kvtool/report.h"
#include "squeeze/squeeze_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

// n rows of dimension d around `blobs` random directions (unit scale, noise 0.3), seeded.
std::vector<float> blob_rows(int64_t n, int64_t d, int64_t blobs, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> centers(static_cast<size_t>(blobs * d)), x(static_cast<size_t>(n * d));
  for (float& v : centers) v = nd(g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < d; ++t) x[i * d + t] = centers[(i % blobs) * d + t] + 0.3f * nd(g);
  return x;
}

KmeansOptions tree_options(int64_t branching, int64_t leaf) {
  KmeansOptions o;
  o.method = KmeansMethod::tree;
  o.branching = branching;
  o.leaf_clusters = leaf;
  return o;
}

// Mean cosine of each row with the unit centroid of its label (higher is a better clustering).
double mean_cosine(const std::vector<float>& x, const std::vector<int64_t>& lab, const std::vector<float>& cent,
                   int64_t d) {
  double total = 0;
  const int64_t n = static_cast<int64_t>(lab.size());
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0, nn = 0;
    for (int64_t t = 0; t < d; ++t) {
      dot += static_cast<double>(x[i * d + t]) * cent[lab[i] * d + t];
      nn += static_cast<double>(x[i * d + t]) * x[i * d + t];
    }
    total += dot / std::sqrt(nn);
  }
  return total / static_cast<double>(n);
}

}  // namespace

TEST_CASE("tree k-means: exact cluster count, every row in one cluster, leaves own disjoint label ranges") {
  const int64_t n = 3000, d = 16, k = 150;
  const auto x = blob_rows(n, d, 40, 3);
  for (KmeansMetric metric : {KmeansMetric::cosine, KmeansMetric::l2}) {
    std::vector<int64_t> lab;
    std::vector<float> cent;
    kmeans(metric, KmeansMethod::tree, tree_options(4, 8), x.data(), n, d, k, 10, 5, lab, cent);
    REQUIRE(lab.size() == static_cast<size_t>(n));
    CHECK(cent.size() == static_cast<size_t>(k * d));
    std::set<int64_t> used(lab.begin(), lab.end());
    CHECK(*used.begin() >= 0);
    CHECK(*used.rbegin() < k);
    // Each leaf's k-means trains on its own rows, so nearly every one of the k labels is used: a
    // tree that lost clusters (apportionment not summing to k) would leave a label range unused.
    CHECK(static_cast<int64_t>(used.size()) >= k - 5);
    for (float v : cent) CHECK(std::isfinite(v));
  }
}

TEST_CASE("tree k-means: a tree of one leaf is the flat k-means, several leaves differ and stay close in quality") {
  const int64_t n = 2000, d = 16, k = 40;
  const auto x = blob_rows(n, d, 25, 9);
  std::vector<int64_t> lf, lt, l4;
  std::vector<float> cf, ct, c4;
  kmeans(KmeansMetric::cosine, KmeansMethod::flat, {}, x.data(), n, d, k, 12, 77, lf, cf);
  kmeans(KmeansMetric::cosine, KmeansMethod::tree, tree_options(16, k), x.data(), n, d, k, 12, 77, lt, ct);
  CHECK(lt == lf);
  CHECK(ct == cf);
  kmeans(KmeansMetric::cosine, KmeansMethod::tree, tree_options(4, 10), x.data(), n, d, k, 12, 77, l4, c4);
  CHECK(l4 != lf);
  const double flat_q = mean_cosine(x, lf, cf, d), tree_q = mean_cosine(x, l4, c4, d);
  INFO("mean cosine flat " << flat_q << " tree " << tree_q);
  CHECK(tree_q > flat_q - 0.03);
  std::vector<int64_t> l2f, l2t;
  std::vector<float> c2f, c2t;
  kmeans(KmeansMetric::l2, KmeansMethod::flat, {}, x.data(), n, d, k, 12, 77, l2f, c2f);
  kmeans(KmeansMetric::l2, KmeansMethod::tree, tree_options(16, k), x.data(), n, d, k, 12, 77, l2t, c2t);
  CHECK(l2t == l2f);
  CHECK(c2t == c2f);
}

TEST_CASE("tree k-means: identical rows do not split (a leaf instead), the cost model is near-linear in rows") {
  const int64_t n = 500, d = 8;
  std::vector<float> same(static_cast<size_t>(n * d), 0.5f);
  std::vector<int64_t> lab;
  std::vector<float> cent;
  kmeans(KmeansMetric::cosine, KmeansMethod::tree, tree_options(4, 4), same.data(), n, d, 50, 5, 1, lab, cent);
  CHECK(cent.size() == static_cast<size_t>(50 * d));
  for (int64_t l : lab) CHECK((l >= 0 && l < 50));

  KmeansOptions o;                                               // automatic, branching 16, leaf 64
  CHECK(resolve_kmeans(o, 5000, 64, 20) == KmeansMethod::flat);  // one leaf: the same cost
  CHECK(resolve_kmeans(o, 32768, 410, 20) == KmeansMethod::tree);
  o.method = KmeansMethod::flat;
  CHECK(resolve_kmeans(o, 32768, 410, 20) == KmeansMethod::flat);
  o.method = KmeansMethod::automatic;
  const double t32 = kmeans_tree_cost(32768, 410, 20, o), t128 = kmeans_tree_cost(131072, 1638, 20, o);
  CHECK(t128 / t32 < 5.0);
  CHECK(kmeans_flat_cost(131072, 1640, 20) / kmeans_flat_cost(32768, 410, 20) == Approx(16.0));
  CHECK(reason_of([] { parse_kmeans_method("kd"); }) == "USAGE");
  // The JSON parameters (Python's builders) take the same names the manifest records.
  for (const char* kind : {"clusterkv", "squeeze"}) {
    json p = make_builder(kind, {{"kmeans", "tree"}, {"kmeans_branching", 4}, {"kmeans_leaf_clusters", 8}})->params();
    CHECK(p["kmeans"] == "tree");
    CHECK(p["kmeans_branching"] == 4);
    CHECK(p["kmeans_leaf_clusters"] == 8);
    CHECK(make_builder(kind, json::object())->params()["kmeans"] == "auto");
    CHECK(reason_of([&] { make_builder(kind, {{"kmeans", "kd"}}); }) == "USAGE");
  }
  KmeansOptions bad;
  bad.branching = 1;
  CHECK(reason_of([&] { check_kmeans_options(bad); }) == "USAGE");
}

TEST_CASE("tree k-means in clusterkv and squeeze: deterministic across threads, shards merge, method recorded") {
  TempDir tmp;
  // Small enough for ASan CI (every part is built eight times), large enough for trees of two
  // levels in both kinds and both squeeze levels.
  kind_dump(tmp.file("d.h5"), 360, 12, 100);
  ClusterKvParams cp;
  cp.tokens_per_cluster = 4;
  cp.kmeans = tree_options(4, 16);
  SqueezeParams sp;
  sp.percent_clusters = 30;
  sp.observation_window = 60;
  sp.kmeans = tree_options(4, 16);
  auto build = [&](const KindBuilder& b, const std::string& out, int threads, int64_t shard) {
    BuildOptions o = quiet_build(tmp.file(out), threads);
    o.prefix = 320;
    o.shard_index = shard < 0 ? 0 : shard;
    o.shard_count = shard < 0 ? 1 : 2;
    build_artifact(tmp.file("d.h5"), o, b);
    return o.output;
  };
  for (const KindBuilder* b : {static_cast<const KindBuilder*>(new ClusterKvBuilder(cp)),
                               static_cast<const KindBuilder*>(new SqueezeBuilder(sp))}) {
    std::unique_ptr<const KindBuilder> own(b);
    const std::string k = b->kind(), a = build(*b, k + "1.kvi", 1, -1), c = build(*b, k + "3.kvi", 3, -1);
    CHECK(read_bytes(a) == read_bytes(c));
    merge_artifacts({build(*b, k + "s1.kvi", 2, 1), build(*b, k + "s0.kvi", 1, 0)}, tmp.file(k + "m.kvi"), "", true);
    CHECK(read_bytes(tmp.file(k + "m.kvi")) == read_bytes(a));
    VerifyOptions vo;
    vo.source = tmp.file("d.h5");
    CHECK_NOTHROW(verify_artifact(a, vo));
    ArtifactReader r(a);
    CHECK(r.manifest()["params"]["kmeans"] == "tree");
    CHECK(r.manifest()["params"]["kmeans_leaf_clusters"] == 16);
    const json& part = r.manifest()["kind_data"]["parts"][0];
    const std::string prefix = k == "clusterkv" ? "ckv" : "sq_fine";
    CHECK(section_as<uint32_t>(r, (prefix + "_sizes").c_str(), 0, 0).size() ==
          (k == "clusterkv" ? 80u : 78u));  // round((320 - 1) / 4) (1 default sink row), floor(30% of 320 - 60)
    if (k == "clusterkv") CHECK(part["kmeans"] == "tree");
    if (k == "squeeze") CHECK(part["kmeans"] == json({{"fine", "tree"}, {"coarse", "tree"}}));
  }
}

namespace {

// Searches of `Mine` against FAISS' `Ref` on the same rows: labels and distances bit for bit, across
// FAISS' query blocks (4096 rows) and database blocks (1024 centroids), below its BLAS threshold, a
// duplicated centroid (the first copy wins); with `nan_row`, row 2 is NaN (label -1 from both). Each
// search runs twice (the second reuses the index's cached norms or block buffer).
template <class Ref, class Mine>
void check_searches_like_faiss(bool nan_row) {
  const int64_t d = 16;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{5, 7}, {300, 64}, {4097, 64}, {5000, 1500}}) {
    std::vector<float> x = blob_rows(n, d, 9, 3), c = blob_rows(k, d, 9, 4);
    for (int64_t t = 0; t < d; ++t) c[(k - 1) * d + t] = c[t];        // the last centroid duplicates the first
    if (nan_row) x[2 * d] = std::numeric_limits<float>::quiet_NaN();  // row 2: every product NaN
    Ref ref(d);
    Mine mine(d);
    ref.add(k, c.data());
    mine.add(k, c.data());
    std::vector<float> dr(n), dm(n);
    std::vector<faiss::Index::idx_t> lr(n), lm(n);
    for (int round = 0; round < 2; ++round) {
      ref.search(n, x.data(), 1, dr.data(), lr.data());
      mine.search(n, x.data(), 1, dm.data(), lm.data());
      INFO("n " << n << " k " << k << " round " << round);
      REQUIRE(lm == lr);
      REQUIRE(std::memcmp(dm.data(), dr.data(), dm.size() * sizeof(float)) == 0);
      if (nan_row) REQUIRE(lm[2] == -1);
      for (int64_t i = 0; i < n; ++i) REQUIRE(lm[i] != k - 1);  // a duplicate never beats the first copy
    }
  }
}

// A whole Clustering::train through `Mine` gives `Ref`'s centroids bit for bit.
template <class Ref, class Mine>
void check_trains_like_faiss(bool spherical) {
  const int64_t d = 16, n = 6000, k = 64;
  const std::vector<float> x = blob_rows(n, d, 20, 5);
  faiss::ClusteringParameters cp;
  cp.niter = 8;
  cp.seed = 17;
  cp.spherical = spherical;
  cp.max_points_per_centroid = 64;  // FAISS samples 4096 rows, as in a real build
  cp.verbose = false;
  faiss::Clustering a(d, k, cp), b(d, k, cp);
  Ref ia(d);
  Mine ib(d);
  a.train(n, x.data(), ia);
  b.train(n, x.data(), ib);
  REQUIRE(std::memcmp(a.centroids.data(), b.centroids.data(), a.centroids.size() * sizeof(float)) == 0);
}

}  // namespace

// TrainingIndexL2 and TrainingIndexIP (common/nearest_l2.h) against FAISS' own IndexFlatL2 and
// IndexFlatIP.
TEST_CASE("TrainingIndexL2 answers exactly like faiss::IndexFlatL2, and trains the same centroids") {
  check_searches_like_faiss<faiss::IndexFlatL2, TrainingIndexL2>(false);
  check_trains_like_faiss<faiss::IndexFlatL2, TrainingIndexL2>(false);
}

TEST_CASE("TrainingIndexIP answers exactly like faiss::IndexFlatIP, and trains the same spherical centroids") {
  check_searches_like_faiss<faiss::IndexFlatIP, TrainingIndexIP>(true);
  check_trains_like_faiss<faiss::IndexFlatIP, TrainingIndexIP>(true);
}
