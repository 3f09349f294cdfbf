// kvtool-pq: the pq kind's commands (`kvtool-pq build ARGS` = `kvtool build pq ARGS`), defined in
// tools/common/kind_options/pq.cpp.
#include "kind_main.h"

int main(int argc, char** argv) { return kvtool::cli::kind_main("pq", argc, argv); }
