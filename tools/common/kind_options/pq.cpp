// kvtool-pq build / append (= kvtool build pq). Logic: lib/kinds/pq; the build options: the table
// kvtool/kinds/pq_params.def.
#include <iostream>

#include "kind_commands.h"
#include "kvtool/kinds/pq.h"
#include "param_options.h"

namespace kvtool::cli {

void add_pq_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  auto params = std::make_shared<PqParams>();
  cmds.push_back(add_build_command(
      app,
      {"Train per-(layer, kv head, subspace) codebooks with FAISS k-means and encode the key rows", "kvdump v1 file",
       [params](CLI::App* c) {
         PqParams& p = *params;
#define KVTOOL_PARAM KVTOOL_CLI_OPTION
#include "kvtool/kinds/pq_params.def"
       },
       [params] { return make_builder(*params); }},
      as_json));
  cmds.push_back(add_append_command<PqAppendSummary>(
      app,
      {{"Encode rows past the old coverage end with the existing codebooks (new index generation)",
        "existing pq artifact", "dump whose rows [0, old coverage end) are those the artifact was built from",
        "new coverage end (default: the dump's committed frontier)", nullptr},
       [](const AppendOptions& o) { return pq_append(o); },
       [](const AppendOptions& o, const PqAppendSummary& s) {
         std::cout << "wrote " << o.output << ": index generation " << s.append.index_generation << ", coverage [0, "
                   << s.append.coverage_end << ")\n";
       }},
      as_json));
}

}  // namespace kvtool::cli
