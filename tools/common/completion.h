// Bash completion generated from the command definitions themselves (the CLI11 apps), so it can
// never list an option a command does not have. `kvtool completion bash` prints it; the build
// writes it and `cmake --install` installs it (share/bash-completion/completions/).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace kvtool::cli {

// One program and the app that parses its command line ("kvtool", the kvtool app).
using ProgramApp = std::pair<std::string, const CLI::App*>;

// A bash script completing every program: subcommands, then each command's options; after an
// option that takes a value, files (or the option's fixed choices when the help lists them).
// `aliases`: command paths that complete like another ("kvtool build pq" like "kvtool-pq build").
std::string bash_completion(const std::vector<ProgramApp>& programs,
                            const std::vector<std::pair<std::string, std::string>>& aliases);

}  // namespace kvtool::cli
