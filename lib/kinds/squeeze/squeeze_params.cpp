// kind "squeeze": its builder from JSON parameters (kvtool/kind_builders.h), the same names as
// `kvtool build squeeze`'s options (calibration_queries: the bytes of a --calibration-queries file,
// which the caller reads).
#include "kvtool/kind_builders.h"
#include "squeeze/squeeze_builder.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_squeeze_builder(const json& params) {
  BuildParams in("squeeze", params);
  SqueezeParams p;
  std::string quantiles, kmeans = "auto", calibration;
  in.get("percent_clusters", p.percent_clusters);
  in.get("coarse_percent", p.coarse_percent);
  in.get("observation_window", p.observation_window);
  in.get_list_text("quantiles", quantiles);
  in.get("iters", p.iters);
  in.get_bytes("calibration_queries", calibration);
  in.get("coarse_factor", p.coarse_factor);
  in.get("kmeans", kmeans);
  in.get("kmeans_branching", p.kmeans.branching);
  in.get("kmeans_leaf_clusters", p.kmeans.leaf_clusters);
  in.finish();
  p.kmeans.method = parse_kmeans_method(kmeans);
  // Given, even as an empty list, it is checked as the command line checks --quantiles.
  if (in.has("quantiles")) p.quantiles = parse_quantiles(quantiles);
  if (in.has("calibration_queries")) p.calibration_queries = calibration_from_bytes(calibration, "calibration_queries");
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const SqueezeParams& p) { return std::make_unique<SqueezeBuilder>(p); }

}  // namespace kvtool
