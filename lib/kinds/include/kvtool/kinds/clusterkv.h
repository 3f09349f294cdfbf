// Kind "clusterkv" (ClusterKV semantic clusters, formats/kinds-v1.md): its parameters, builder and
// append for a caller outside the library. The kind's internals are in lib/kinds/clusterkv.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/append.h"
#include "kvtool/builder.h"
#include "kvtool/kinds/param_table.h"
#include "kvtool/kinds/kmeans_options.h"
#include "kvtool/layers.h"  // parse_layer_list: dense_layers

namespace kvtool {

enum class CentroidRule { raw_mean, spherical };

// The fields, their defaults and what they mean: kvtool/kinds/clusterkv_params.def.
// tokens_per_cluster and clusters both 0: the count chosen from the part size
// (clusterkv_default_clusters). i8 centroids: formats/kinds-v1.md §4.3.
struct ClusterKvParams {
#define KVTOOL_PARAM KVTOOL_PARAM_FIELD
#define KVTOOL_PARAM_TEXT KVTOOL_PARAM_FIELD
#include "kvtool/kinds/clusterkv_params.def"
  KmeansOptions kmeans;  // flat, tree or automatic (kvtool/kinds/kmeans_options.h)
};

// The parsers of the table's text rows: clusterkv_parse_centroid ("raw-mean" | "spherical"),
// clusterkv_parse_dense_layers (a layer list, kvtool/layers.h); USAGE naming `what` otherwise.
#define KVTOOL_PARAM_TEXT KVTOOL_PARAM_TEXT_PARSER
#include "kvtool/kinds/clusterkv_params.def"

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
ClusterKvAppendSummary clusterkv_append(const AppendOptions& o, int64_t window, int64_t window_clusters);

}  // namespace kvtool
