// ClusterKV semantic clusters (formats/kinds-v1.md, "clusterkv"): cosine k-means of the keys of
// each (layer, kv head), clusters ranked by raw q·centroid, whole clusters taken until the token
// budget is met; decode windows appended as new generations of clusters.
#pragma once
#include <string>
#include <vector>

#include "common/kmeans.h"
#include "kvtool/append.h"
#include "kvtool/builder.h"
#include "kvtool/layers.h"  // parse_layer_list: dense_layers

namespace kvtool {

enum class CentroidRule { raw_mean, spherical };

struct ClusterKvParams {
  // clusters = max(1, round(indexed rows / tokens_per_cluster)); > 0 clusters: a fixed count
  // instead; both 0: chosen from the part size (clusterkv_default_clusters).
  int64_t tokens_per_cluster = 0;
  int64_t clusters = 0;
  int64_t iters = 20;  // Lloyd iterations (fixed count, as the reference)
  CentroidRule centroid = CentroidRule::raw_mean;
  std::string centroid_dtype = "f16";  // stored centroids: "f32" or "f16" (half the bytes, f16-rounded)
  std::vector<int64_t> dense_layers;   // layers left unindexed (queries return all their rows)
  KmeansOptions kmeans;                // flat, tree or automatic (common/kmeans.h)
};

CentroidRule parse_centroid_rule(const std::string& s);

// The cluster count of parts of n rows when none is given: the reference's 80 tokens per cluster
// at 32K rows (410 clusters), growing as the cube root of the rows below and above it, so that a
// short prefix is cut into enough clusters for a budget of a few percent to choose among
// (docs/quality.md, "Defaults": at 80 tokens per cluster a 384-row prefix has 5 clusters and
// loses to a recent-window selection). round(410 (n / 32768)^(1/3)), within [1, n].
int64_t clusterkv_default_clusters(int64_t n);  // "raw-mean" | "spherical"; USAGE otherwise

class ClusterKvBuilder : public KindBuilder {
 public:
  explicit ClusterKvBuilder(ClusterKvParams p) : p_(std::move(p)) {}
  std::string kind() const override { return "clusterkv"; }
  int64_t default_sink() const override { return 16; }
  int64_t default_local() const override { return 0; }
  json params() const override;
  void check(int64_t head_dim) const override;
  std::unique_ptr<KindBuilder> resolved(int64_t head_dim, int64_t indexed_rows) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  ClusterKvParams p_;
};

// Clusters each sealed window of `window` new rows (past the old indexed end, up to `prefix` minus
// the local window) into `window_clusters` clusters and appends them as a new index generation.
struct ClusterKvAppendSummary {
  AppendSummary append;
  int64_t windows = 0;         // sealed windows clustered
  int64_t uncovered_rows = 0;  // rows up to the prefix left for a later append (a partial window)
  json to_json() const;        // the append's JSON with these two fields added
};
ClusterKvAppendSummary clusterkv_append(const std::string& artifact, const std::string& dump, const std::string& output,
                                        int64_t prefix, int64_t window, int64_t window_clusters,
                                        const std::string& sign_key, bool quiet);

}  // namespace kvtool
