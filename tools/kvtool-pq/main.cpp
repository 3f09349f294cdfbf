// kvtool-pq: the pq kind's commands (`kvtool-pq build ARGS` = `kvtool build pq ARGS`), defined in
// tools/common/kinds/pq.cpp.
#include "kind_commands.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("pq", argc, argv); }
