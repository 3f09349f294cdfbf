// SqueezedAttention for shared fixed prefixes (formats/kinds-v1.md, "squeeze"):
// fine clusters of the prefix keys (cosine assignment, raw-mean centroids, sizes), a coarse level
// over the fine centroids with a parent map, and global thresholds calibrated from queries of the
// observation window. A query prunes coarse groups, then keeps fine clusters over the threshold.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/kmeans.h"
#include "kvtool/builder.h"

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
  KmeansOptions kmeans;  // both levels: flat, tree or automatic (common/kmeans.h)
};

class SqueezeBuilder : public KindBuilder {
 public:
  explicit SqueezeBuilder(SqueezeParams p);
  std::string kind() const override { return "squeeze"; }
  int64_t default_sink() const override { return 0; }
  int64_t default_local() const override { return p_.observation_window; }
  json params() const override;
  void check(int64_t head_dim) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  SqueezeParams p_;
  std::string calibration_sha256_;
};

std::vector<double> parse_quantiles(const std::string& s);  // "0.5,0.7"; USAGE on error
// Calibration queries from the bytes of a raw little-endian float32 file; SHAPE_MISMATCH naming
// `source` unless they are a non-empty whole number of floats.
std::vector<float> calibration_from_bytes(std::string_view bytes, const std::string& source);

}  // namespace kvtool
