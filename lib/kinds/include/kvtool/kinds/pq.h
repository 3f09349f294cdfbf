// Kind "pq" (PQCache product quantization, formats/kinds-v1.md): what a caller outside the library
// sets and calls, its parameters, its builder and its append. The kind's internals are in lib/kinds/pq.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kvtool/append.h"
#include "kvtool/builder.h"

namespace kvtool {

struct PqParams {
  // m (must divide d) and b (1..16; codes uint8 up to 8, uint16 above); 0: chosen from the part
  // size (pq_default_shape).
  int64_t subspaces = 0;
  int64_t bits = 0;
  int64_t iters = 25;                     // Lloyd iterations per subspace (fixed count, the stopping rule)
  int64_t max_points_per_centroid = 256;  // training sample cap per centroid (FAISS's rule)
  std::string loss = "l2";                // "l2" | "anisotropic" (score-aware, lib/kinds/pq/pq_aniso.h)
  std::string codebook_dtype = "f16";     // stored codebooks: "f32" or "f16" (half the bytes, f16-rounded)
  double anisotropic_eta = 0;  // h_par / h_perp of loss "anisotropic"; 0: derived per part from the dump's queries
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
PqAppendSummary pq_append(const std::string& artifact, const std::string& dump, const std::string& output,
                          int64_t prefix, const std::string& sign_key, bool quiet);

}  // namespace kvtool
