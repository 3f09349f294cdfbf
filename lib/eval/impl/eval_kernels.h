// The inner loops of eval's dense reference (lib/offline/src/eval_reference.cpp), with run-time
// dispatch to AVX-512 or AVX2+FMA like the runtime's scorers (kvtool/scoring.h). The library is
// built for baseline x86-64, where these loops run two doubles at a time or, for the reductions,
// one. Internal to offline.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kvtool/scoring.h"  // Simd

namespace kvtool::eval {

// The softmax of one row of logits in place: p = exp(z - max) / sum; returns max + log(sum).
// The sum runs in 8 interleaved partial sums (row r in lane r % 8) added in a fixed order at every
// level, so it does not depend on the level; exp does, by at most an ulp: the AVX-512 and AVX2+FMA
// paths share one polynomial (Cody-Waite reduction, degree-13 Taylor) lane for lane, and the
// values outside [-708, 0] and the n % 8 last ones take std::exp there too; the portable level is
// std::exp throughout.
double softmax_row(double* z, int64_t n, scoring::Simd level);
// out[i] = in[i] (float to double, exact).
void widen(const float* in, double* out, int64_t n, scoring::Simd level);
// acc[t] += sum over k of w[k] * V[ids[k] * d + t], rows in the order given.
void add_rows(const double* w, const int64_t* ids, size_t count, const float* V, int64_t d, double* acc,
              scoring::Simd level);

}  // namespace kvtool::eval
