// K-means of one part's rows (offline layer; shared by clusterkv and squeeze): flat FAISS k-means
// and a balanced k-means tree whose cost grows about linearly with the row count at a fixed number
// of rows per cluster (formats/kinds-v1.md, "clusterkv", "Clustering method").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/json.h"
#include "kvtool/kinds/kmeans_options.h"  // KmeansMethod, KmeansOptions

namespace kvtool {

// cosine: spherical k-means of the normalized rows (argmax cosine); l2: Euclidean k-means.
enum class KmeansMetric { cosine, l2 };

void check_kmeans_options(const KmeansOptions& o);  // USAGE on a bad branching or leaf size
// The options as recorded in the manifest params (kmeans, kmeans_branching, kmeans_leaf_clusters: the
// command line's --kmeans, --kmeans-branching, --kmeans-leaf-clusters).
void add_kmeans_params(json& params, const KmeansOptions& o);

// Cost model, in row·centroid distance evaluations: flat = n·k·iters; the tree splits a node of
// k > leaf clusters into b = min(branching, ceil(k / leaf)) children (training on at most
// kSplitSample·b rows, then one assignment of all n rows) and recurses on n/b rows and k/b clusters.
constexpr int64_t kSplitSample = 256;  // rows per child a split trains on (FAISS's seeded sample)
double kmeans_flat_cost(int64_t n, int64_t k, int64_t iters);
double kmeans_tree_cost(int64_t n, int64_t k, int64_t iters, const KmeansOptions& o);
// flat or tree: the method given, or for automatic the cheaper by the cost model (flat on a tie).
KmeansMethod resolve_kmeans(const KmeansOptions& o, int64_t n, int64_t k, int64_t iters);

// Flat cosine k-means of rows [n, d] into k clusters (FAISS spherical k-means, seeded initialisation
// from distinct rows, fixed iteration count): runs iters - 1 FAISS iterations, then assigns every
// row to the unit centroid of highest cosine. Returns those labels and the unit centroids.
void cosine_kmeans(const float* rows, int64_t n, int64_t d, int64_t k, int64_t iters, uint64_t seed,
                   std::vector<int64_t>& labels, std::vector<float>& unit_centroids);
// Flat L2 k-means of rows [n, d] into k clusters (FAISS, iters iterations), then the final
// assignment to the nearest centroid. Returns those labels and FAISS' centroids.
void l2_kmeans(const float* rows, int64_t n, int64_t d, int64_t k, int64_t iters, uint64_t seed,
               std::vector<int64_t>& labels, std::vector<float>& centroids);

// K-means by `method` (flat or tree; resolve automatic first) and metric. Labels in [0, k), every
// label used by the rows of exactly one leaf; centroids [k, d] as the leaf's flat k-means returns
// them (unit for cosine). A tree with one leaf is the flat k-means itself (same seed, same bytes).
void kmeans(KmeansMetric metric, KmeansMethod method, const KmeansOptions& o, const float* rows, int64_t n, int64_t d,
            int64_t k, int64_t iters, uint64_t seed, std::vector<int64_t>& labels, std::vector<float>& centroids);

}  // namespace kvtool
