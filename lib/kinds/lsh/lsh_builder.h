// MagicPIG SimHash tables (formats/kinds-v1.md, "lsh"): keys centered by their mean,
// K-bit SimHash codes in L tables from seeded Gaussian projections, CSR buckets per table; a query
// samples the rows that collide with it in at least c tables, with inclusion probability
// u = P(Binomial(L, p^K) >= c), for the self-normalized importance-sampling estimator.
#pragma once
#include <string>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/kinds/lsh.h"  // LshParams
#include "lsh/lsh_internal.h"

namespace kvtool {

class LshBuilder : public KindBuilder {
 public:
  explicit LshBuilder(LshParams p) : p_(p) {}
  std::string kind() const override { return "lsh"; }
  int64_t default_sink() const override { return 4; }
  int64_t default_local() const override { return 64; }
  json params() const override;
  void check(int64_t head_dim) const override;
  PartOutput build_part(const PartInput& in) const override;

 private:
  LshParams p_;
};

}  // namespace kvtool
