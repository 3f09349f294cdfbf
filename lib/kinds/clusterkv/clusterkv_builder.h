// ClusterKV semantic clusters (formats/kinds-v1.md, "clusterkv"): cosine k-means of the keys of
// each (layer, kv head), clusters ranked by raw q·centroid, whole clusters taken until the token
// budget is met; decode windows appended as new generations of clusters.
#pragma once
#include <string>
#include <vector>

#include "common/kmeans.h"
#include "kvtool/builder.h"
#include "kvtool/kinds/clusterkv.h"  // ClusterKvParams, clusterkv_append

namespace kvtool {

// The cluster count of parts of n rows when none is given: the reference's 80 tokens per cluster
// at 32K rows (410 clusters), growing as the cube root of the rows below and above it, so that a
// short prefix is cut into enough clusters for a budget of a few percent to choose among
// (docs/quality.md, "Defaults": at 80 tokens per cluster a 384-row prefix has 5 clusters and
// loses to a recent-window selection). round(410 (n / 32768)^(1/3)), within [1, n], for f32 and
// f16 centroids. i8 centroids (d + 1 bytes, against f16's 2d) take the count that the f16 count's
// raw part bytes buy (each cluster also costs 8 bytes of sizes and prefix sums):
// round(410 (n / 32768)^(1/3) (2d + 8) / (d + 9)) (docs/reports/defaults-sweep.md 3.2, "i8 centroids").
int64_t clusterkv_default_clusters(int64_t n, int64_t d, const std::string& centroid_dtype);

class ClusterKvBuilder : public KindBuilder {
 public:
  explicit ClusterKvBuilder(ClusterKvParams p) : p_(std::move(p)) {}
  std::string kind() const override { return "clusterkv"; }
  // 1, not the reference's 16 (as pq: docs/reports/defaults-sweep.md, "Sinks").
  int64_t default_sink() const override { return 1; }
  int64_t default_local() const override { return 0; }
  json params() const override;
  void check(int64_t head_dim) const override;
  std::unique_ptr<KindBuilder> resolved(int64_t head_dim, int64_t indexed_rows) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  ClusterKvParams p_;
};

}  // namespace kvtool
