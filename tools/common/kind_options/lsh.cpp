// kvtool-lsh build (= kvtool build lsh). Logic: lib/kinds/lsh; the build options: the table
// kvtool/kinds/lsh_params.def.
#include "kind_commands.h"
#include "kvtool/kinds/lsh.h"
#include "param_options.h"

namespace kvtool::cli {

void add_lsh_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  auto params = std::make_shared<LshParams>();
  auto options = [params](CLI::App* c) {
    LshParams& p = *params;
#define KVTOOL_PARAM KVTOOL_CLI_OPTION
#include "kvtool/kinds/lsh_params.def"
  };
  auto make = [params] { return make_builder(*params); };
  cmds.push_back(add_build_command(
      app, {"Center keys, hash them with K-bit SimHash into L tables of CSR buckets", "kvdump v1 file", options, make},
      as_json));
}

}  // namespace kvtool::cli
