// kvtool-squeeze: SqueezedAttention centroid hierarchies for shared prefixes. Argument parsing only;
// the logic is lib/src/kinds/squeeze.cpp.
#include <iostream>

#include "cli.h"
#include "squeeze/squeeze.h"

using namespace kvtool;

int main(int argc, char** argv) {
  CLI::App app{"kvtool-squeeze: SqueezedAttention fine/coarse centroid indexes over shared-prefix K/V dumps (see kvtool-squeeze(1))"};
  app.set_version_flag("--version", std::string("kvtool-squeeze ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false;
  cli::BuilderCli b;
  SqueezeParams p;
  std::string dump, quantiles;
  auto* build = app.add_subcommand("build", "Cluster the prefix keys (fine + coarse) and calibrate global thresholds from queries");
  build->add_option("DUMP", dump, "kvdump v1 file with /kv/q queries in the observation window")->required();
  build->add_option("--percent-clusters", p.percent_clusters, "fine clusters as a percentage of the indexed rows")->capture_default_str();
  build->add_option("--coarse-percent", p.coarse_percent, "coarse groups as a percentage of the fine clusters")->capture_default_str();
  build->add_option("--observation-window", p.observation_window, "last prefix rows: not clustered (local), their queries calibrate")->capture_default_str();
  build->add_option("--quantiles", quantiles, "calibrated quantiles, comma-separated (default 0.5,0.7,0.8,0.9)");
  build->add_option("--iters", p.iters, "k-means iterations (fixed count)")->capture_default_str();
  build->add_option("--calibration-queries", p.calibration_path, "raw float32 [L, H_q, N, d] queries to calibrate with instead of the observation window's");
  build->add_option("--coarse-factor", p.coarse_factor, "coarse pass keeps groups scoring >= factor x the fine threshold")->capture_default_str();
  cli::add_builder_options(build, b);
  return cli::run("kvtool-squeeze", app, argc, argv, &as_json, [&]() -> int {
    as_json = b.json;
    cli::finish_builder_options(b);
    if (!quantiles.empty()) p.quantiles = parse_quantiles(quantiles);
    json j = build_artifact(dump, b.opt, SqueezeBuilder(p));
    if (b.json) cli::print_json(j);
    else if (!b.opt.quiet) cli::print_build_summary(j);
    return 0;
  });
}
