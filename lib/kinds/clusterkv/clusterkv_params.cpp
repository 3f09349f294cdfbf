// kind "clusterkv": its builder from JSON parameters (kvtool/kind_builders.h), the same names and
// rules as `kvtool build clusterkv`'s options.
#include "clusterkv/clusterkv_builder.h"
#include "kvtool/error.h"
#include "kvtool/kind_builders.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_clusterkv_builder(const json& params) {
  BuildParams in("clusterkv", params);
  ClusterKvParams p;
  // The command line's --tokens-per-cluster excludes --clusters: one rule for the cluster count.
  KVT_CHECK(!(in.has("tokens_per_cluster") && in.has("clusters")), USAGE,
            "clusterkv: give tokens_per_cluster or clusters, not both");
  in.get("tokens_per_cluster", p.tokens_per_cluster);
  in.get("clusters", p.clusters);
  in.get("iters", p.iters);
  std::string centroid = "raw-mean", dense, kmeans = "auto";
  in.get("centroid", centroid);
  in.get("kmeans", kmeans);
  in.get("centroid_dtype", p.centroid_dtype);
  in.get("kmeans_branching", p.kmeans.branching);
  in.get("kmeans_leaf_clusters", p.kmeans.leaf_clusters);
  in.get_list_text("dense_layers", dense);
  in.finish();
  p.centroid = parse_centroid_rule(centroid);
  p.kmeans.method = parse_kmeans_method(kmeans);
  if (!dense.empty()) p.dense_layers = parse_layer_list(dense, "dense_layers");
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const ClusterKvParams& p) { return std::make_unique<ClusterKvBuilder>(p); }

}  // namespace kvtool
