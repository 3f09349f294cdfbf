// kvtool-clusterkv: ClusterKV cosine clusters. `build` clusters the keys of each (layer, kv head),
// `append` adds sealed decode windows as new generations. Logic: lib/src/kinds/clusterkv.cpp.
#include <iostream>

#include "cli.h"
#include "clusterkv/clusterkv.h"

using namespace kvtool;

int main(int argc, char** argv) {
  CLI::App app{"kvtool-clusterkv: ClusterKV semantic-cluster indexes over K/V dumps (see kvtool-clusterkv(1))"};
  app.set_version_flag("--version", std::string("kvtool-clusterkv ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false;

  cli::BuilderCli b;
  ClusterKvParams p;
  std::string dump, centroid = "raw-mean", dense_layers;
  auto* build = app.add_subcommand("build", "Cosine k-means of the keys of every (layer, kv head)");
  build->add_option("DUMP", dump, "kvdump v1 file")->required();
  auto* tpc = build->add_option("--tokens-per-cluster", p.tokens_per_cluster, "clusters = indexed rows / N (rounded, at least 1)")->capture_default_str();
  auto* cl = build->add_option("--clusters", p.clusters, "a fixed number of clusters per part instead");
  tpc->excludes(cl);
  build->add_option("--iters", p.iters, "k-means iterations (fixed count)")->capture_default_str();
  build->add_option("--centroid", centroid, "stored centroid: raw-mean (mean of the raw keys, as the reference) or spherical (unit mean direction)")->capture_default_str();
  build->add_option("--dense-layers", dense_layers, "layers to leave unindexed, e.g. 0,1 or 0-1 (queries return all their rows)");
  cli::add_builder_options(build, b);

  std::string art, adump, aout, akey;
  int64_t aprefix = -1, window = 320, wclusters = 8;
  bool aquiet = false;
  auto* append = app.add_subcommand("append", "Cluster each sealed window of new rows into its own clusters (new index generation)");
  append->add_option("ART", art, "existing clusterkv artifact")->required();
  append->add_option("DUMP", adump, "dump whose rows below the old coverage end are unchanged")->required();
  append->add_option("-o,--output", aout, "new artifact")->required();
  append->add_option("--prefix", aprefix, "rows available (default: the dump's committed frontier); a partial window stays uncovered");
  append->add_option("--window", window, "rows per sealed window")->capture_default_str();
  append->add_option("--window-clusters", wclusters, "clusters per window")->capture_default_str();
  append->add_option("--sign-key", akey, "Ed25519 private key (PEM)");
  append->add_flag("--json", as_json, "JSON summary");
  append->add_flag("-q,--quiet", aquiet, "no progress");

  return cli::run("kvtool-clusterkv", app, argc, argv, &as_json, [&]() -> int {
    if (*build) {
      as_json = b.json;
      cli::finish_builder_options(b);
      p.centroid = parse_centroid_rule(centroid);
      if (!dense_layers.empty()) p.dense_layers = parse_layer_list(dense_layers);
      json j = build_artifact(dump, b.opt, ClusterKvBuilder(p));
      if (b.json) cli::print_json(j);
      else if (!b.opt.quiet) cli::print_build_summary(j);
      return 0;
    }
    json j = clusterkv_append(art, adump, aout, aprefix, window, wclusters, akey, aquiet || as_json);
    if (as_json) cli::print_json(j);
    else if (!aquiet)
      std::cout << "wrote " << aout << ": index generation " << j["index_generation"] << ", " << j["windows"]
                << " window(s), coverage [0, " << j["coverage"][1] << "), " << j["uncovered_rows"] << " rows left uncovered\n";
    return 0;
  });
}
