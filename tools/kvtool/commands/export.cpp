// kvtool export ART -o OUT.h5 [--json]
#include <iostream>

#include "commands.h"
#include "kvtool/output_path.h"
#include "kvtool/report.h"

namespace kvtool::cmd {

cli::Command register_export(CLI::App& app, Flags& flags) {
  struct Args {
    std::string in, out;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("export", "Write every section of an artifact as an HDF5 dataset (manifest as an attribute)");
  sub->add_option("ART", a->in, "artifact (.kvi)")->required();
  sub->add_option("-o,--output", a->out, "output HDF5 file")->required();
  sub->add_flag("--force", a->force, "overwrite an existing output (never the artifact itself)");
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] {
            KVT_CHECK(!same_file(a->out, a->in), USAGE,
                      "-o '" << a->out << "' is the artifact being exported; choose another path");
            if (!a->force) refuse_existing_output(a->out);
            json j = export_artifact(a->in, a->out);
            return emit(flags, j, [&] {
              std::cout << "wrote " << j["sections"] << " sections of " << a->in << " to " << a->out << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
