// kvtool-squeeze build (= kvtool build squeeze). Logic: lib/kinds/squeeze; the build options: the
// table kvtool/kinds/squeeze_params.def, then the k-means options.
#include "kind_commands.h"
#include "kmeans_cli_options.h"
#include "kvtool/kinds/squeeze.h"
#include "param_options.h"

namespace kvtool::cli {

void add_squeeze_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  struct Args {
    SqueezeParams p;
    struct Texts {  // the table's text rows (quantiles, the calibration queries' path), parsed by make
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_FIELD
#include "kvtool/kinds/squeeze_params.def"
    } t;
    std::string kmeans = "auto";
  };
  auto a = std::make_shared<Args>();
  auto options = [a](CLI::App* c) {
    SqueezeParams& p = a->p;
    Args::Texts& t = a->t;
#define KVTOOL_PARAM KVTOOL_CLI_OPTION
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_OPTION
#include "kvtool/kinds/squeeze_params.def"
    add_kmeans_options(c, a->kmeans, a->p.kmeans);
  };
  auto make = [a] {
    SqueezeParams& p = a->p;
    const Args::Texts& t = a->t;
#define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_PARSE
#include "kvtool/kinds/squeeze_params.def"
    p.kmeans.method = parse_kmeans_method(a->kmeans);
    return make_builder(p);
  };
  cmds.push_back(
      add_build_command(app,
                        {"Cluster the prefix keys (fine + coarse) and calibrate global thresholds from queries",
                         "kvdump v1 file with /kv/q queries in the observation window", options, make},
                        as_json));
}

}  // namespace kvtool::cli
