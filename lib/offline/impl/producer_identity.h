// What every producer of a dump (synth, dump --llama2c, dump --gguf) records the same way.
#pragma once
#include <string>

#include "kvtool/dump.h"
#include "kvtool/producers.h"

namespace kvtool::impl {

// The identity fields a caller sets (IdentityOptions), the empty adapter set and the position
// contract of post-RoPE absolute rows.
DumpIdentity base_identity(const IdentityOptions& o);
std::string representation_for(DType t);
void check_frontier(const IdentityOptions& o, int64_t T);

}  // namespace kvtool::impl
