// kind "clusterkv": its builder from JSON parameters (kvtool/kind_builders.h), the names, types and
// defaults of its table (kvtool/kinds/clusterkv_params.def) and the k-means options, as
// `kvtool build clusterkv`'s options.
#include "clusterkv/clusterkv_builder.h"
#include "common/param_json.h"
#include "kvtool/error.h"
#include "kvtool/kind_builders.h"

namespace kvtool {

CentroidRule clusterkv_parse_centroid(const std::string& text, const std::string&) { return parse_centroid_rule(text); }

std::vector<int64_t> clusterkv_parse_dense_layers(const std::string& text, const std::string& what) {
  return parse_layer_list(text, what);
}

std::unique_ptr<KindBuilder> make_clusterkv_builder(const json& params) {
  BuildParams in("clusterkv", params);
  ClusterKvParams p;
  // The command line's --tokens-per-cluster excludes --clusters: one rule for the cluster count.
  KVT_CHECK(!(in.has("tokens_per_cluster") && in.has("clusters")), USAGE,
            "clusterkv: give tokens_per_cluster or clusters, not both");
#define KVTOOL_PARAM KVTOOL_JSON_GET
#define KVTOOL_PARAM_TEXT KVTOOL_JSON_GET_TEXT
#include "kvtool/kinds/clusterkv_params.def"
  const std::string kmeans = read_kmeans_options(in, p.kmeans);
  in.finish();
#define KVTOOL_PARAM_TEXT KVTOOL_JSON_PARSE_TEXT
#include "kvtool/kinds/clusterkv_params.def"
  p.kmeans.method = parse_kmeans_method(kmeans);
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const ClusterKvParams& p) { return std::make_unique<ClusterKvBuilder>(p); }

}  // namespace kvtool
