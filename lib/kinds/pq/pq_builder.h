// PQCache product quantization of keys (formats/kinds-v1.md, "pq"): per (layer, kv head,
// subspace) L2 k-means with 2^bits centroids (FAISS), codes of the actual key rows, LUT scoring.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "kvtool/builder.h"
#include "kvtool/kinds/pq.h"  // PqParams, pq_append

namespace kvtool {

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
  // 1, not the reference's 32: at equal attended rows, fewer fixed first rows and more index-chosen
  // ones retained more on every shared model and prefix; the one kept guards a model whose sink is
  // one extreme first token (docs/reports/defaults-sweep.md, "Sinks").
  int64_t default_sink() const override { return 1; }
  int64_t default_local() const override { return 0; }
  json params() const override;
  void check(int64_t head_dim) const override;
  std::unique_ptr<KindBuilder> resolved(int64_t head_dim, int64_t indexed_rows) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  PqParams p_;
};

}  // namespace kvtool
