// kvtool-clusterkv build / append (= kvtool build clusterkv). Logic: lib/kinds/clusterkv; the build
// options: the table kvtool/kinds/clusterkv_params.def, then the k-means options.
#include <iostream>

#include "kind_commands.h"
#include "kvtool/kinds/clusterkv.h"
#include "kmeans_cli_options.h"
#include "param_options.h"

namespace kvtool::cli {

namespace {

Command add_build(CLI::App& app, bool& as_json) {
  struct Args {
    ClusterKvParams p;
    struct Texts {  // the table's text rows (centroid, dense_layers), parsed by make
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_FIELD
#include "kvtool/kinds/clusterkv_params.def"
    } t;
    std::string kmeans = "auto";
  };
  auto a = std::make_shared<Args>();
  auto options = [a](CLI::App* c) {
    ClusterKvParams& p = a->p;
    Args::Texts& t = a->t;
#define KVTOOL_PARAM KVTOOL_CLI_OPTION
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_OPTION
#include "kvtool/kinds/clusterkv_params.def"
    c->get_option("--tokens-per-cluster")->excludes(c->get_option("--clusters"));  // one rule for the count
    add_kmeans_options(c, a->kmeans, a->p.kmeans);
  };
  auto make = [a] {
    ClusterKvParams& p = a->p;
    const Args::Texts& t = a->t;
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_PARSE
#include "kvtool/kinds/clusterkv_params.def"
    p.kmeans.method = parse_kmeans_method(a->kmeans);
    return make_builder(p);
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
  auto append = [w](const AppendOptions& o) { return clusterkv_append(o, w->rows, w->clusters); };
  auto summary = [](const AppendOptions& a, const ClusterKvAppendSummary& s) {
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
