// Kind "pq" (PQCache product quantization, formats/kinds-v1.md): what a caller outside the library
// sets and calls, its parameters, its builder and its append. The kind's internals are in lib/kinds/pq.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kvtool/append.h"
#include "kvtool/builder.h"
#include "kvtool/kinds/param_table.h"

namespace kvtool {

// The fields, their defaults and what they mean: kvtool/kinds/pq_params.def. subspaces and bits 0:
// chosen from the part size (pq_default_shape); codes are uint8 up to 8 bits, uint16 above.
struct PqParams {
#define KVTOOL_PARAM KVTOOL_PARAM_FIELD
#include "kvtool/kinds/pq_params.def"
};

// The pq builder of `p` (as kvtool/kind_builders.h's make_builder("pq", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const PqParams& p);

// Encodes rows between the old coverage end and `prefix` (-1: the dump's frontier) with the
// existing codebooks; writes a new index generation. Refuses a dump whose content over the old
// covered range differs. Returns its summary.
struct PqAppendSummary {
  AppendSummary append;
  int64_t previous_coverage_end = 0;  // the old artifact's coverage end
  int64_t rows_encoded_per_part = 0;  // new rows encoded, averaged over the parts
  json to_json() const;               // the append's JSON with these two fields added
};
PqAppendSummary pq_append(const AppendOptions& o);

}  // namespace kvtool
