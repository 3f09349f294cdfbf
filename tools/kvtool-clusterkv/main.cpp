// kvtool-clusterkv: the clusterkv kind's commands (`kvtool-clusterkv build ARGS` = `kvtool build clusterkv ARGS`),
// defined in tools/common/kinds/clusterkv.cpp.
#include "kind_commands.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("clusterkv", argc, argv); }
