// kvtool build KIND ARGS... = kvtool-KIND build ARGS..., run in this process (tools/common/kind_options/).
#include "commands.h"
#include "kind_commands.h"

namespace kvtool::cmd {

cli::Command register_build(CLI::App& app, Flags&) {
  auto kind = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "build", "Run the builder of an index kind: kvtool build KIND ARGS... = kvtool-KIND build ARGS...");
  sub->add_option("KIND", *kind, cli::kind_names(" | "))->required();
  sub->prefix_command();  // everything after KIND goes to the kind's build as it is
  return {sub, [sub, kind] { return cli::run_kind_build(*kind, sub->remaining()); }};
}

}  // namespace kvtool::cmd
