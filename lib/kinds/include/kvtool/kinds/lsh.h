// Kind "lsh" (MagicPIG SimHash tables, formats/kinds-v1.md): its parameters and builder for a caller
// outside the library. The kind's internals are in lib/kinds/lsh.
#pragma once
#include <cstdint>
#include <memory>

#include "kvtool/builder.h"
#include "kvtool/kinds/param_table.h"

namespace kvtool {

// The fields (K = bits, L = tables), their defaults and what they mean: kvtool/kinds/lsh_params.def.
struct LshParams {
#define KVTOOL_PARAM KVTOOL_PARAM_FIELD
#include "kvtool/kinds/lsh_params.def"
};

// The lsh builder of `p` (as kvtool/kind_builders.h's make_builder("lsh", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const LshParams& p);

}  // namespace kvtool
