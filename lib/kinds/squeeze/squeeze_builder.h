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
#include "kvtool/kinds/squeeze.h"  // SqueezeParams

namespace kvtool {

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

}  // namespace kvtool
