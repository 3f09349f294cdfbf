// kvtool-clusterkv build / append (= kvtool build clusterkv). Logic: lib/kinds/clusterkv.
#include <iostream>

#include "kind_commands.h"
#include "kvtool/kinds/clusterkv.h"
#include "kmeans_cli_options.h"

namespace kvtool::cli {

namespace {

Command add_build(CLI::App& app, bool& as_json) {
  struct Args {
    ClusterKvParams p;
    std::string centroid = "raw-mean", dense_layers, kmeans = "auto";
  };
  auto a = std::make_shared<Args>();
  auto options = [a](CLI::App* c) {
    auto* tpc = c->add_option("--tokens-per-cluster", a->p.tokens_per_cluster,
                              "clusters = indexed rows / N (rounded, at least 1); default: neither this nor "
                              "--clusters, the count chosen from the indexed rows n and head_dim d: "
                              "round(410 (n/32768)^(1/3)) (the reference's 80 tokens per cluster at 32K rows) for "
                              "f16 and f32 centroids, round(410 (n/32768)^(1/3) (2d + 8) / (d + 9)) for i8 (the "
                              "same bytes)")
                    ->check(CLI::PositiveNumber);
    auto* cl = c->add_option("--clusters", a->p.clusters, "a fixed number of clusters per part instead")
                   ->check(CLI::PositiveNumber);
    tpc->excludes(cl);
    c->add_option("--iters", a->p.iters, "k-means iterations (fixed count)")->capture_default_str();
    c->add_option(
         "--centroid", a->centroid,
         "stored centroid: raw-mean (mean of the raw keys, as the reference) or spherical (unit mean direction)")
        ->capture_default_str();
    c->add_option("--centroid-dtype", a->p.centroid_dtype,
                  "stored centroids: i8 (d + 1 bytes each: i8 codes and a power-of-two scale, so the default "
                  "count is larger at the same bytes), f16 (2d bytes) or f32; queries rank the stored values")
        ->capture_default_str();
    c->add_option("--dense-layers", a->dense_layers,
                  "layers to leave unindexed, e.g. 0,1 or 0-1 (queries return all their rows)");
    add_kmeans_options(c, a->kmeans, a->p.kmeans);
  };
  auto make = [a] {
    a->p.centroid = parse_centroid_rule(a->centroid);
    a->p.kmeans.method = parse_kmeans_method(a->kmeans);
    if (!a->dense_layers.empty()) a->p.dense_layers = parse_layer_list(a->dense_layers, "--dense-layers");
    return make_builder(a->p);
  };
  return add_build_command(
      app, {"Cosine k-means of the keys of every (layer, kv head)", "kvdump v1 file", options, make}, as_json);
}

Command add_append(CLI::App& app, bool& as_json) {
  struct Window {
    int64_t rows = 320, clusters = 8;
  };
  auto w = std::make_shared<Window>();
  auto options = [w](CLI::App* c) {
    c->add_option("--window", w->rows, "rows per sealed window")->capture_default_str();
    c->add_option("--window-clusters", w->clusters, "clusters per window")->capture_default_str();
  };
  auto append = [w](const AppendArgs& a, bool quiet) {
    return clusterkv_append(a.artifact, a.dump, a.output, a.prefix, w->rows, w->clusters, a.sign_key, quiet);
  };
  auto summary = [](const AppendArgs& a, const ClusterKvAppendSummary& s) {
    std::cout << "wrote " << a.output << ": index generation " << s.append.index_generation << ", " << s.windows
              << " window(s), coverage [0, " << s.append.coverage_end << "), " << s.uncovered_rows
              << " rows left uncovered\n";
  };
  return add_append_command<ClusterKvAppendSummary>(
      app,
      {{"Cluster each sealed window of new rows into its own clusters (new index generation)",
        "existing clusterkv artifact", "dump whose rows below the old coverage end are unchanged",
        "rows available (default: the dump's committed frontier); a partial window stays uncovered", options},
       append,
       summary},
      as_json);
}

}  // namespace

void add_clusterkv_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  cmds.push_back(add_build(app, as_json));
  cmds.push_back(add_append(app, as_json));
}

}  // namespace kvtool::cli
