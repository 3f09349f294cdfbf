// kvtool completion bash: the shell completion script for kvtool and every kvtool-KIND, generated
// from their command definitions (tools/common/completion.h).
#include <iostream>

#include "commands.h"
#include "completion.h"
#include "kind_commands.h"

namespace kvtool::cmd {

cli::Command register_completion(CLI::App& app, Flags&) {
  auto shell = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("completion",
                                 "Print the shell completion script (bash) for kvtool and the kvtool-KIND programs");
  sub->add_option("SHELL", *shell, "shell: bash")->required()->check(CLI::IsMember({"bash"}));
  return {sub, [&app, shell] {  // owns what SHELL is parsed into
            KVT_CHECK(*shell == "bash", USAGE, "completion is generated for bash only");
            // The kind programs' apps, built as kvtool-KIND builds them (kind_commands.h).
            std::vector<std::unique_ptr<CLI::App>> kind_apps;
            std::vector<cli::Command> unused;
            bool as_json = false;
            std::vector<cli::ProgramApp> programs{{"kvtool", &app}};
            std::vector<std::pair<std::string, std::string>> aliases;
            for (const auto& k : cli::kind_clis()) {
              kind_apps.push_back(std::make_unique<CLI::App>(k.about));
              kind_apps.back()->set_version_flag("--version", "");
              k.add(*kind_apps.back(), unused, as_json);
              programs.emplace_back("kvtool-" + k.kind, kind_apps.back().get());
              aliases.emplace_back("kvtool build " + k.kind, "kvtool-" + k.kind + " build");
            }
            std::cout << cli::bash_completion(programs, aliases);
            return 0;
          }};
}

}  // namespace kvtool::cmd
