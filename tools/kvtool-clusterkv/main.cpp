// kvtool-clusterkv: the clusterkv kind's commands (`kvtool-clusterkv build ARGS` = `kvtool build clusterkv ARGS`),
// defined in tools/common/kind_options/clusterkv.cpp.
#include "kind_main.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("clusterkv", argc, argv); }
