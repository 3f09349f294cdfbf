// Kind "clusterkv" (ClusterKV semantic clusters, formats/kinds-v1.md): its parameters, builder and
// append for a caller outside the library. The kind's internals are in lib/kinds/clusterkv.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/append.h"
#include "kvtool/builder.h"
#include "kvtool/kinds/kmeans_options.h"
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
  // Stored centroids: "f32", "f16" (half the bytes) or "i8" (d + 1 bytes: i8 codes and a power-of-two
  // scale per centroid; formats/kinds-v1.md §4.3).
  std::string centroid_dtype = "i8";
  std::vector<int64_t> dense_layers;  // layers left unindexed (queries return all their rows)
  KmeansOptions kmeans;               // flat, tree or automatic (kvtool/kinds/kmeans_options.h)
};

CentroidRule parse_centroid_rule(const std::string& s);  // "raw-mean" | "spherical"; USAGE otherwise

// The clusterkv builder of `p` (as kvtool/kind_builders.h's make_builder("clusterkv", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const ClusterKvParams& p);

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
