// K-means of one part's rows: flat FAISS k-means and the balanced k-means tree (common/kmeans.h).
#include "common/kmeans.h"

#include "common/nearest_l2.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "kvtool/error.h"
#include "kvtool/prng.h"

namespace kvtool {

KmeansMethod parse_kmeans_method(const std::string& s) {
  if (s == "flat") return KmeansMethod::flat;
  if (s == "tree") return KmeansMethod::tree;
  if (s == "auto") return KmeansMethod::automatic;
  KVT_THROW(USAGE, "kmeans must be flat, tree or auto, got '" << s << "'");
}

const char* kmeans_method_name(KmeansMethod m) {
  return m == KmeansMethod::flat ? "flat" : m == KmeansMethod::tree ? "tree" : "auto";
}

void check_kmeans_options(const KmeansOptions& o) {
  KVT_CHECK(o.branching >= 2 && o.branching <= 1024, USAGE, "kmeans_branching must be in 2..1024");
  KVT_CHECK(o.leaf_clusters >= 1 && o.leaf_clusters < (int64_t{1} << 31), USAGE, "kmeans_leaf_clusters must be >= 1");
}

void add_kmeans_params(json& params, const KmeansOptions& o) {
  params["kmeans"] = kmeans_method_name(o.method);
  params["kmeans_branching"] = o.branching;
  params["kmeans_leaf_clusters"] = o.leaf_clusters;
}

namespace {

// Children of a node of k clusters: 1 (a leaf) when k fits a leaf.
int64_t children(const KmeansOptions& o, int64_t k) {
  return k <= o.leaf_clusters ? 1 : std::min(o.branching, (k + o.leaf_clusters - 1) / o.leaf_clusters);
}

double tree_cost(double n, double k, int64_t iters, const KmeansOptions& o) {
  if (k <= static_cast<double>(o.leaf_clusters)) return n * k * static_cast<double>(iters);
  const double b = std::min(static_cast<double>(o.branching), std::ceil(k / static_cast<double>(o.leaf_clusters)));
  const double split = std::min(n, b * kSplitSample) * b * static_cast<double>(iters) + n * b;
  return split + b * tree_cost(n / b, k / b, iters, o);
}

// FAISS k-means of rows [n, d] (normalized ones when spherical) into k centroids with niter
// iterations, training on at most max_points_per_centroid·k rows (FAISS' seeded sample), then one
// assignment of every row to its nearest centroid (inner product when spherical, else L2).
void faiss_kmeans(const float* x, int64_t n, int64_t d, int64_t k, int64_t niter, uint64_t seed, bool spherical,
                  int64_t max_points_per_centroid, std::vector<int64_t>& labels, std::vector<float>& centroids) {
  faiss::ClusteringParameters cp;
  cp.niter = static_cast<int>(niter);
  cp.spherical = spherical;
  cp.seed = static_cast<int>(seed & 0x7fffffff);
  cp.max_points_per_centroid = static_cast<int>(max_points_per_centroid);
  cp.min_points_per_centroid = 1;
  cp.verbose = false;
  auto flat_index = [&]() -> std::unique_ptr<faiss::IndexFlat> {
    if (spherical) return std::make_unique<TrainingIndexIP>(static_cast<faiss::Index::idx_t>(d));
    return std::make_unique<TrainingIndexL2>(static_cast<faiss::Index::idx_t>(d));  // one per use
  };
  faiss::Clustering clus(static_cast<int>(d), static_cast<int>(k), cp);
  auto index = flat_index();
  clus.train(n, x, *index);
  centroids = clus.centroids;
  auto assign = flat_index();
  assign->add(k, centroids.data());
  std::vector<float> dist(static_cast<size_t>(n));
  labels.assign(static_cast<size_t>(n), 0);
  assign->search(n, x, 1, dist.data(), reinterpret_cast<faiss::Index::idx_t*>(labels.data()));
}

std::vector<float> normalized(const float* rows, int64_t n, int64_t d) {
  std::vector<float> x(rows, rows + n * d);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t t = 0; t < d; ++t) s += static_cast<double>(x[i * d + t]) * x[i * d + t];
    float inv = s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.f;
    for (int64_t t = 0; t < d; ++t) x[i * d + t] *= inv;
  }
  return x;
}

// Clusters per child, proportional to its rows (largest remainder, ties to the lower index), at
// least 1 and at most its rows for a non-empty child, 0 for an empty one; they sum to k.
std::vector<int64_t> apportion(int64_t k, const std::vector<int64_t>& rows) {
  const double total = static_cast<double>(std::accumulate(rows.begin(), rows.end(), int64_t{0}));
  const size_t b = rows.size();
  std::vector<double> quota(b);
  std::vector<int64_t> ks(b, 0);
  int64_t sum = 0;
  for (size_t i = 0; i < b; ++i) {
    quota[i] = static_cast<double>(k) * static_cast<double>(rows[i]) / total;
    if (rows[i] > 0) ks[i] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(quota[i])), 1, rows[i]);
    sum += ks[i];
  }
  // Feasible: k <= total rows, and the non-empty children (<= b <= k) each need one cluster.
  for (; sum != k; sum += sum < k ? 1 : -1) {
    size_t best = b;
    for (size_t i = 0; i < b; ++i) {
      const bool can = sum < k ? ks[i] < rows[i] : ks[i] > 1;
      const double r = quota[i] - static_cast<double>(ks[i]);
      if (can && (best == b || (sum < k ? r > quota[best] - ks[best] : r < quota[best] - ks[best]))) best = i;
    }
    ks[best] += sum < k ? 1 : -1;
  }
  return ks;
}

// The tree over one part: nodes split their rows with a small k-means of the compared vectors
// (normalized rows for cosine), leaves run the flat k-means of the raw rows; leaves number their
// clusters consecutively in depth-first order.
class KmeansTree {
 public:
  KmeansTree(KmeansMetric metric, const KmeansOptions& o, const float* rows, int64_t d, int64_t iters)
      : metric_(metric), o_(o), rows_(rows), d_(d), iters_(iters) {}

  void run(int64_t n, int64_t k, uint64_t seed, std::vector<int64_t>& labels, std::vector<float>& centroids) {
    labels_.assign(static_cast<size_t>(n), 0);
    centroids_.assign(static_cast<size_t>(k * d_), 0.f);
    next_ = 0;
    n_ = n;
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
    node(all, k, seed, true);
    labels = std::move(labels_);
    centroids = std::move(centroids_);
  }

 private:
  // Normalized once, at the first split: a one-leaf tree is the flat k-means and needs none.
  const float* compared() {
    if (metric_ == KmeansMetric::l2) return rows_;
    if (unit_.empty()) unit_ = normalized(rows_, n_, d_);
    return unit_.data();
  }

  static std::vector<float> gather(const float* x, const std::vector<int64_t>& idx, int64_t d) {
    std::vector<float> g(idx.size() * static_cast<size_t>(d));
    for (size_t i = 0; i < idx.size(); ++i) std::copy_n(x + idx[i] * d, d, g.data() + i * static_cast<size_t>(d));
    return g;
  }

  // Rows of each child, in ascending row order; empty when the split put every row in one child.
  std::vector<std::vector<int64_t>> split(const std::vector<int64_t>& idx, int64_t b, uint64_t seed, bool root) {
    const int64_t m = static_cast<int64_t>(idx.size());
    std::vector<float> g;
    if (!root) g = gather(compared(), idx, d_);
    std::vector<int64_t> lab;
    std::vector<float> cent;
    faiss_kmeans(root ? compared() : g.data(), m, d_, b, iters_, seed, metric_ == KmeansMetric::cosine, kSplitSample,
                 lab, cent);
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(b));
    for (int64_t i = 0; i < m; ++i) out[static_cast<size_t>(lab[i])].push_back(idx[i]);
    for (const auto& c : out)
      if (static_cast<int64_t>(c.size()) == m) return {};
    return out;
  }

  void node(const std::vector<int64_t>& idx, int64_t k, uint64_t seed, bool root) {
    const int64_t b = children(o_, k);
    if (b > 1) {
      // The split's own seed stream, distinct from the leaf that would use `seed` at this node.
      auto parts = split(idx, b, part_seed(seed, 0x7472656573706c74ull, 0), root);
      if (!parts.empty()) {
        std::vector<int64_t> rows;
        for (const auto& c : parts) rows.push_back(static_cast<int64_t>(c.size()));
        const std::vector<int64_t> ks = apportion(k, rows);
        for (size_t c = 0; c < parts.size(); ++c)
          if (ks[c] > 0) node(parts[c], ks[c], part_seed(seed, 0x747265656e6f6465ull, c + 1), false);
        return;
      }
    }
    leaf(idx, k, seed, root);  // k fits a leaf, or the rows do not split (e.g. all equal)
  }

  void leaf(const std::vector<int64_t>& idx, int64_t k, uint64_t seed, bool root) {
    const int64_t m = static_cast<int64_t>(idx.size());
    std::vector<float> g;
    if (!root) g = gather(rows_, idx, d_);
    const float* x = root ? rows_ : g.data();
    std::vector<int64_t> lab;
    std::vector<float> cent;
    if (metric_ == KmeansMetric::cosine)
      cosine_kmeans(x, m, d_, k, iters_, seed, lab, cent);
    else
      l2_kmeans(x, m, d_, k, iters_, seed, lab, cent);
    for (int64_t i = 0; i < m; ++i) labels_[static_cast<size_t>(idx[i])] = next_ + lab[i];
    std::copy(cent.begin(), cent.end(), centroids_.begin() + next_ * d_);
    next_ += k;
  }

  const KmeansMetric metric_;
  const KmeansOptions o_;
  const float* rows_;
  const int64_t d_, iters_;
  std::vector<float> unit_;  // normalized rows (cosine), the vectors splits compare
  std::vector<int64_t> labels_;
  std::vector<float> centroids_;
  int64_t n_ = 0;     // rows of the part
  int64_t next_ = 0;  // first cluster id of the next leaf
};

}  // namespace

double kmeans_flat_cost(int64_t n, int64_t k, int64_t iters) {
  return static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(iters);
}

double kmeans_tree_cost(int64_t n, int64_t k, int64_t iters, const KmeansOptions& o) {
  return tree_cost(static_cast<double>(n), static_cast<double>(k), iters, o);
}

KmeansMethod resolve_kmeans(const KmeansOptions& o, int64_t n, int64_t k, int64_t iters) {
  if (o.method != KmeansMethod::automatic) return o.method;
  return kmeans_tree_cost(n, k, iters, o) < kmeans_flat_cost(n, k, iters) ? KmeansMethod::tree : KmeansMethod::flat;
}

void cosine_kmeans(const float* rows, int64_t n, int64_t d, int64_t k, int64_t iters, uint64_t seed,
                   std::vector<int64_t>& labels, std::vector<float>& unit) {
  std::vector<float> x = normalized(rows, n, d);
  // FAISS runs iters - 1 full iterations; the last iteration's assignment is the final one and
  // its update is the stored-centroid rule of add_clusters, so the whole costs `iters` iterations,
  // like FAISS' own spherical k-means with niter = iters. Trains on every row, as the reference.
  faiss_kmeans(x.data(), n, d, k, iters - 1, seed, true, 1 << 30, labels, unit);
}

void l2_kmeans(const float* rows, int64_t n, int64_t d, int64_t k, int64_t iters, uint64_t seed,
               std::vector<int64_t>& labels, std::vector<float>& centroids) {
  faiss_kmeans(rows, n, d, k, iters, seed, false, 1 << 30, labels, centroids);
}

void kmeans(KmeansMetric metric, KmeansMethod method, const KmeansOptions& o, const float* rows, int64_t n, int64_t d,
            int64_t k, int64_t iters, uint64_t seed, std::vector<int64_t>& labels, std::vector<float>& centroids) {
  KVT_CHECK(method != KmeansMethod::automatic, INTERNAL, "kmeans: resolve the automatic method first");
  if (method == KmeansMethod::tree) {
    KmeansTree(metric, o, rows, d, iters).run(n, k, seed, labels, centroids);
  } else if (metric == KmeansMetric::cosine) {
    cosine_kmeans(rows, n, d, k, iters, seed, labels, centroids);
  } else {
    l2_kmeans(rows, n, d, k, iters, seed, labels, centroids);
  }
}

}  // namespace kvtool
