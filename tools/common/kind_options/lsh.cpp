// kvtool-lsh build (= kvtool build lsh). Logic: lib/kinds/lsh.
#include "kind_commands.h"
#include "kvtool/kinds/lsh.h"

namespace kvtool::cli {

void add_lsh_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  auto p = std::make_shared<LshParams>();
  auto options = [p](CLI::App* c) {
    c->add_option("--bits,-K", p->bits, "bits per table code, 1..16")->capture_default_str();
    c->add_option("--tables,-L", p->tables, "number of tables")->capture_default_str();
  };
  auto make = [p] { return make_builder(*p); };
  cmds.push_back(add_build_command(
      app, {"Center keys, hash them with K-bit SimHash into L tables of CSR buckets", "kvdump v1 file", options, make},
      as_json));
}

}  // namespace kvtool::cli
