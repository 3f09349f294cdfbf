// PQCache product quantization of keys (formats/kinds-v1.md, "pq"): per (layer, kv head,
// subspace) L2 k-means with 2^bits centroids (FAISS), codes of the actual key rows, LUT scoring.
#pragma once
#include <memory>
#include <string>
#include <utility>

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

// The (m, b) of parts of n rows of dimension d when `m` and/or `b` are 0 (chosen; a nonzero one is
// kept): the most code bits m·b (ties: the larger b) whose index bytes — codebooks 2^b·d·e (e the
// bytes of a stored codebook element), codes m·n — fit in those of the published setting (m 2,
// b 6, f32 codebooks: 2^8·d + 2n), over m dividing d, m <= 32, 4 <= b <= 8 and 2^b < n (as many
// centroids as rows would leave the part dense). Short prefixes get many subspaces, long ones
// m 2, b 7 with f16 codebooks; docs/quality.md, "Defaults", has the sweep behind it. None fits
// (a part of a few rows): m 2, b 6.
std::pair<int64_t, int64_t> pq_default_shape(int64_t m, int64_t b, int64_t d, int64_t n,
                                             int64_t codebook_element_bytes);

class PqBuilder : public KindBuilder {
 public:
  explicit PqBuilder(PqParams p) : p_(p) {}
  std::string kind() const override { return "pq"; }
  int64_t default_sink() const override { return 32; }
  int64_t default_local() const override { return 0; }
  json params() const override;
  void check(int64_t head_dim) const override;
  std::unique_ptr<KindBuilder> resolved(int64_t head_dim, int64_t indexed_rows) const override;
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
