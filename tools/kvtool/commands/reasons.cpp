// kvtool reasons [--json]
#include <cstdio>

#include "commands.h"

namespace kvtool::cmd {

cli::Command register_reasons(CLI::App& app, Flags& flags) {
  auto* sub = app.add_subcommand("reasons", "List every reason code with its exit code");
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [&flags] {
            json arr = json::array();
            for (const auto& r : all_reasons())
              arr.push_back({{"reason", r.code}, {"exit_code", static_cast<int>(r.exit)}, {"meaning", r.meaning}});
            if (flags.json)
              cli::print_json({{"schema_version", kJsonSchemaVersion}, {"reasons", arr}});
            else
              for (const auto& r : all_reasons())
                std::cout << cli::strprintf("%-28s %d  %s\n", r.code, static_cast<int>(r.exit), r.meaning);
            return 0;
          }};
}

}  // namespace kvtool::cmd
