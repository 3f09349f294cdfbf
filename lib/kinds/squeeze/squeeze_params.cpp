// kind "squeeze": its builder from JSON parameters (kvtool/kind_builders.h), the names, types and
// defaults of its table (kvtool/kinds/squeeze_params.def) and the k-means options, as `kvtool build
// squeeze`'s options (calibration_queries: the bytes of a --calibration-queries file, which the
// caller reads).
#include "common/param_json.h"
#include "kvtool/kind_builders.h"
#include "squeeze/squeeze_builder.h"

namespace kvtool {

std::vector<double> squeeze_parse_quantiles(const std::string& text, const std::string&) {
  return parse_quantiles(text);
}

std::vector<float> squeeze_parse_calibration_queries(const std::string& text, const std::string& what) {
  return calibration_from_bytes(text, what);
}

std::unique_ptr<KindBuilder> make_squeeze_builder(const json& params) {
  BuildParams in("squeeze", params);
  SqueezeParams p;
#define KVTOOL_PARAM KVTOOL_JSON_GET
#define KVTOOL_PARAM_TEXT KVTOOL_JSON_GET_TEXT
#include "kvtool/kinds/squeeze_params.def"
  const std::string kmeans = read_kmeans_options(in, p.kmeans);
  in.finish();
#define KVTOOL_PARAM_TEXT KVTOOL_JSON_PARSE_TEXT
#include "kvtool/kinds/squeeze_params.def"
  p.kmeans.method = parse_kmeans_method(kmeans);
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const SqueezeParams& p) { return std::make_unique<SqueezeBuilder>(p); }

}  // namespace kvtool
