// Kind "squeeze" (SqueezedAttention, formats/kinds-v1.md): its parameters, their parsers and its
// builder for a caller outside the library. The kind's internals are in lib/kinds/squeeze.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/kinds/kmeans_options.h"

namespace kvtool {

struct SqueezeParams {
  double percent_clusters = 5.0;     // fine clusters = max(1, floor(percent/100 · indexed rows))
  double coarse_percent = 25.0;      // coarse groups = max(1, round(percent/100 · fine clusters))
  int64_t observation_window = 100;  // last rows of the prefix: not clustered, their queries calibrate
  std::vector<double> quantiles{0.5, 0.7, 0.8, 0.9};
  int64_t iters = 20;
  double coarse_factor = 0.5;  // query rule "factor": keep groups scoring >= coarse_factor x the threshold
  // Optional calibration queries instead of the dump's observation window: float32 [L, H_q, N, d],
  // row-major, of the dump's L, H_q and d (N inferred from the count). The caller reads them (the
  // CLI's --calibration-queries file: calibration_from_bytes); the SHA-256 of their little-endian
  // bytes goes in the params.
  std::vector<float> calibration_queries;
  KmeansOptions kmeans;  // both levels: flat, tree or automatic (kvtool/kinds/kmeans_options.h)
};

// The squeeze builder of `p` (as kvtool/kind_builders.h's make_builder("squeeze", params) from JSON).
std::unique_ptr<KindBuilder> make_builder(const SqueezeParams& p);

std::vector<double> parse_quantiles(const std::string& s);  // "0.5,0.7"; USAGE on error
// Calibration queries from the bytes of a raw little-endian float32 file; SHAPE_MISMATCH naming
// `source` unless they are a non-empty whole number of floats.
std::vector<float> calibration_from_bytes(std::string_view bytes, const std::string& source);

}  // namespace kvtool
