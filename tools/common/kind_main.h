// The entry point of the kvtool-KIND programs, apart from kind_commands.h so that their main.cpp
// does not compile CLI11 (tools/CMakeLists.txt: the tools' build time is mostly CLI11 and JSON).
#pragma once
#include <string>

namespace kvtool::cli {

// The whole program kvtool-KIND (argv[0] names it in help text). `kind` must be one of kind_clis().
int kind_main(const std::string& kind, int argc, char** argv);

}  // namespace kvtool::cli
