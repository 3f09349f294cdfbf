// kind "pq": its builder from JSON parameters (kvtool/kind_builders.h), the same names as
// `kvtool build pq`'s options.
#include "kvtool/kind_builders.h"
#include "pq/pq_builder.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_pq_builder(const json& params) {
  BuildParams in("pq", params);
  PqParams p;
  in.get("subspaces", p.subspaces);
  in.get("bits", p.bits);
  in.get("iters", p.iters);
  in.get("max_points_per_centroid", p.max_points_per_centroid);
  in.get("loss", p.loss);
  in.get("anisotropic_eta", p.anisotropic_eta);
  in.get("codebook_dtype", p.codebook_dtype);
  in.finish();
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const PqParams& p) { return std::make_unique<PqBuilder>(p); }

}  // namespace kvtool
