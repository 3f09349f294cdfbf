// Kind "lsh" (MagicPIG SimHash tables, formats/kinds-v1.md): its parameters and builder for a caller
// outside the library. The kind's internals are in lib/kinds/lsh.
#pragma once
#include <cstdint>
#include <memory>

#include "kvtool/builder.h"

namespace kvtool {

struct LshParams {
  int64_t bits = 10;     // K, 1..16
  int64_t tables = 150;  // L
};

// The lsh builder of `p` (as kvtool/kind_builders.h's make_builder("lsh", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const LshParams& p);

}  // namespace kvtool
