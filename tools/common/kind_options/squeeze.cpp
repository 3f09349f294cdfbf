// kvtool-squeeze build (= kvtool build squeeze). Logic: lib/kinds/squeeze.
#include <fstream>
#include <iterator>

#include "kind_commands.h"
#include "kmeans_cli_options.h"
#include "kvtool/kinds/squeeze.h"

namespace kvtool::cli {

namespace {
// --calibration-queries: the tool reads the file, the library takes its floats.
std::vector<float> read_calibration_queries(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open calibration queries '" << path << "'");
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return calibration_from_bytes(data, path);
}
}  // namespace

void add_squeeze_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  struct Args {
    SqueezeParams p;
    std::string quantiles, kmeans = "auto", calibration_path;
  };
  auto a = std::make_shared<Args>();
  auto options = [a](CLI::App* c) {
    SqueezeParams& p = a->p;
    c->add_option("--percent-clusters", p.percent_clusters, "fine clusters as a percentage of the indexed rows")
        ->capture_default_str();
    c->add_option("--coarse-percent", p.coarse_percent, "coarse groups as a percentage of the fine clusters")
        ->capture_default_str();
    c->add_option("--observation-window", p.observation_window,
                  "last prefix rows: not clustered (local), their queries calibrate")
        ->capture_default_str();
    c->add_option("--quantiles", a->quantiles, "calibrated quantiles, comma-separated (default 0.5,0.7,0.8,0.9)");
    c->add_option("--iters", p.iters, "k-means iterations (fixed count)")->capture_default_str();
    c->add_option("--calibration-queries", a->calibration_path,
                  "raw float32 [L, H_q, N, d] queries to calibrate with instead of the observation window's");
    c->add_option("--coarse-factor", p.coarse_factor,
                  "query rule coarse_rule=factor: keep coarse groups scoring >= factor x the fine threshold (the "
                  "default rule, bound, needs no factor)")
        ->capture_default_str();
    add_kmeans_options(c, a->kmeans, a->p.kmeans);
  };
  auto make = [a] {
    if (!a->quantiles.empty()) a->p.quantiles = parse_quantiles(a->quantiles);
    a->p.kmeans.method = parse_kmeans_method(a->kmeans);
    if (!a->calibration_path.empty()) a->p.calibration_queries = read_calibration_queries(a->calibration_path);
    return make_builder(a->p);
  };
  cmds.push_back(
      add_build_command(app,
                        {"Cluster the prefix keys (fine + coarse) and calibrate global thresholds from queries",
                         "kvdump v1 file with /kv/q queries in the observation window", options, make},
                        as_json));
}

}  // namespace kvtool::cli
