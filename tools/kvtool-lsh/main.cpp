// kvtool-lsh: the lsh kind's commands (`kvtool-lsh build ARGS` = `kvtool build lsh ARGS`), defined in
// tools/common/kind_options/lsh.cpp.
#include "kind_main.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("lsh", argc, argv); }
