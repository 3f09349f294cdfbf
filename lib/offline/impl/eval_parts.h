// The parts of `kvtool eval` (lib/offline/src/eval.cpp drives them): the dense reference of a block
// of queries, the metrics of one receipt against it, and the sampling estimator. Internal to offline.
#pragma once
#include <cstdint>
#include <vector>

#include "kvtool/query.h"

namespace kvtool::eval {

// The covered support [0, E) of one (layer, kv head) in double, row-major [E, d], converted once
// for all the queries of that kv head (the float -> double conversion is exact).
struct DenseSupport {
  std::vector<double> K, V;
  int64_t E = 0, d = 0;
  void load(const float* k, const float* v, int64_t rows, int64_t dim);
};

// One query's dense attention over the support: probabilities p (max-subtracted softmax of
// q·k/sqrt(d)), the log-normalizer that restores the logits, and the output o = sum p v. Points
// into the DenseBlock that computed it.
struct DenseReference {
  const double* p = nullptr;  // [E]
  const double* o = nullptr;  // [d]
  double log_normalizer = 0;
};

// Dense attention of n queries at once: logits and outputs as two double-precision GEMMs (BLAS
// dgemm), the softmax per query row with its exact maximum subtracted. Double GEMMs keep every
// metric within rounding of a plain double loop (README.md, "Measured": eval).
struct DenseBlock {
  std::vector<double> P, O, log_normalizer;  // [n, E], [n, d], [n]
  int64_t n = 0, E = 0, d = 0;
  void compute(const double* Q, int64_t count, const DenseSupport& s);  // Q: [count, d] double
  DenseReference row(int64_t i) const {
    return {P.data() + i * E, O.data() + i * d, log_normalizer[static_cast<size_t>(i)]};
  }
  // Queries per block: at most 256, and at most 2^23 doubles (64 MiB) of probabilities.
  static int64_t block_rows(int64_t E);
};

// One receipt measured against the reference: rows kept (candidates + always included, below E),
// retained mass, the oracle's mass with as many rows (the `rows` largest p, ties by lower row),
// recall of the oracle's support, and the error of the renormalized output over the kept rows.
struct ReceiptMetrics {
  int64_t rows = 0;
  double retained = 0, oracle = 0, recall = 0, error = 0, relative_error = 0, fraction = 0, output_norm = 0;
  std::vector<char> kept;       // per support row
  std::vector<int64_t> ids;     // the kept rows, ascending
  std::vector<double> scratch;  // a copy of p for the oracle's selection
  void measure(const DenseReference& ref, const CandidateReceipt& rc, const float* V, int64_t E, int64_t d);

 private:
  void measure_oracle(const DenseReference& ref, int64_t E);
};

// (max, sum-exp, weighted value sum) state of a partial softmax; merge() combines two partial
// states into the state of the union (the MagicPIG estimator merges its sampled part with the
// exact sink/local part this way).
struct SoftmaxState {
  double max = -1e300, sum = 0;
  std::vector<double> acc;  // sum of exp(logit - max) * v
  explicit SoftmaxState(size_t d = 0) : acc(d, 0.0) {}
  void add(double logit, const float* v);
  void merge(const SoftmaxState& o);
  std::vector<double> output() const;  // acc / sum
};

// Output error of the self-normalized importance-sampling estimate: sampled rows with logits
// z - ln u (u = inclusion probability), merged with the exact always-included part.
double sampled_output_error(const DenseReference& ref, const ReceiptMetrics& m, const CandidateReceipt& rc,
                            const float* V, int64_t E, int64_t d);

}  // namespace kvtool::eval
