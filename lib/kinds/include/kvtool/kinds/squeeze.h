// Kind "squeeze" (SqueezedAttention, formats/kinds-v1.md): its parameters, their parsers and its
// builder for a caller outside the library. The kind's internals are in lib/kinds/squeeze.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/kinds/param_table.h"
#include "kvtool/kinds/kmeans_options.h"

namespace kvtool {

// The fields, their defaults and what they mean: kvtool/kinds/squeeze_params.def. Fine clusters =
// max(1, floor(percent_clusters/100 · indexed rows)), coarse groups = max(1, round(coarse_percent/100 ·
// fine clusters)); coarse_factor is for the query rule "factor". calibration_queries (optional,
// instead of the dump's observation window): float32 [L, H_q, N, d], row-major, of the dump's L, H_q
// and d (N inferred from the count); the caller reads them (the CLI's --calibration-queries file),
// and the SHA-256 of their little-endian bytes goes in the params.
struct SqueezeParams {
#define KVTOOL_PARAM KVTOOL_PARAM_FIELD
#define KVTOOL_PARAM_TEXT KVTOOL_PARAM_FIELD
#include "kvtool/kinds/squeeze_params.def"
  KmeansOptions kmeans;  // both levels: flat, tree or automatic (kvtool/kinds/kmeans_options.h)
};

// The parsers of the table's text rows: squeeze_parse_quantiles (parse_quantiles) and
// squeeze_parse_calibration_queries (calibration_from_bytes, `what` naming the source).
#define KVTOOL_PARAM_TEXT KVTOOL_PARAM_TEXT_PARSER
#include "kvtool/kinds/squeeze_params.def"

// The squeeze builder of `p` (as kvtool/kind_builders.h's make_builder("squeeze", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const SqueezeParams& p);

std::vector<double> parse_quantiles(const std::string& s);  // "0.5,0.7"; USAGE on error
// Calibration queries from the bytes of a raw little-endian float32 file; SHAPE_MISMATCH naming
// `source` unless they are a non-empty whole number of floats.
std::vector<float> calibration_from_bytes(std::string_view bytes, const std::string& source);

}  // namespace kvtool
