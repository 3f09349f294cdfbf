// kvtool-squeeze: the squeeze kind's commands (`kvtool-squeeze build ARGS` = `kvtool build squeeze ARGS`), defined in
// tools/common/kind_options/squeeze.cpp.
#include "kind_main.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("squeeze", argc, argv); }
