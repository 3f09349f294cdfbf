// PQCache product quantization of keys (formats/kinds-v1.md, "pq"): per (layer, kv head,
// subspace) L2 k-means with 2^bits centroids (FAISS), codes of the actual key rows, LUT scoring.
#pragma once
#include <string>

#include "kvtool/append.h"
#include "kvtool/builder.h"

namespace kvtool {

struct PqParams {
  int64_t subspaces = 2;                  // m; must divide d
  int64_t bits = 6;                       // b; 1..16 (codes uint8 up to 8, uint16 above)
  int64_t iters = 25;                     // Lloyd iterations per subspace (fixed count, the stopping rule)
  int64_t max_points_per_centroid = 256;  // training sample cap per centroid (FAISS's rule)
  std::string loss = "l2";                // "l2" | "anisotropic" (score-aware, lib/kinds/pq/pq_aniso.h)
  std::string codebook_dtype = "f32";     // stored codebooks: "f32" or "f16" (half the bytes, f16-rounded)
  double anisotropic_eta = 0;  // h_par / h_perp of loss "anisotropic"; 0: derived per part from the dump's queries
};

class PqBuilder : public KindBuilder {
 public:
  explicit PqBuilder(PqParams p) : p_(p) {}
  std::string kind() const override { return "pq"; }
  int64_t default_sink() const override { return 32; }
  int64_t default_local() const override { return 0; }
  json params() const override;
  void check(int64_t head_dim) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  PqParams p_;
};

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
