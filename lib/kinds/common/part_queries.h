// Queries a part's build may learn from (offline half only): the dump's /kv/q rows of the query
// heads that share the part's kv head, and the query metric of clusterkv's --assignment query
// (formats/kinds-v1.md §4.1).
#pragma once
#include <cstdint>
#include <vector>

#include "kvtool/builder.h"

namespace kvtool {

// The dump's /kv/q queries at positions [p0, p1) of every query head mapped to the part's kv head,
// head by head and in position order, d floats each; empty when the dump has none there.
std::vector<float> dump_part_queries(const PartInput& in, int64_t p0, int64_t p1);

// Rows [n, d] in coordinates where squared L2 distance is the queries' mean squared score
// difference: x' = x L with L Lᵀ = (1/N) Σ q qᵀ over the N queries (d floats each). k-means on them
// groups keys whose q·k agree for the queries seen, which is what ranking a cluster by q·centroid
// needs. L is the Cholesky factor in double, pivots at most 1e-12 of the largest diagonal taken as
// 0 (a direction no query reaches adds nothing to a distance). Deterministic.
std::vector<float> query_metric_rows(const float* rows, int64_t n, int64_t d, const std::vector<float>& queries);

}  // namespace kvtool
