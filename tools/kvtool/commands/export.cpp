// kvtool export ART -o OUT.h5 [--json]
#include <iostream>

#include "commands.h"
#include "kvtool/report.h"

namespace kvtool::cmd {

cli::Command register_export(CLI::App& app, Flags& flags) {
  struct Args {
    std::string in, out;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("export", "Write every section of an artifact as an HDF5 dataset (manifest as an attribute)");
  sub->add_option("ART", a->in, "artifact (.kvi)")->required();
  sub->add_option("-o,--output", a->out, "output HDF5 file")->required();
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] {
            json j = export_artifact(a->in, a->out);
            return emit(flags, j, [&] {
              std::cout << "wrote " << j["sections"] << " sections of " << a->in << " to " << a->out << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
