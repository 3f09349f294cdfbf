// The parts of `kvtool eval` (lib/offline/src/eval.cpp drives them): the dense reference of one
// query, the metrics of one receipt against it, and the sampling estimator. Internal to offline.
#pragma once
#include <cstdint>
#include <vector>

#include "kvtool/query.h"

namespace kvtool::eval {

// Dense attention of one query over the covered support [0, E): probabilities p (max-subtracted
// softmax of q·k/sqrt(d)), the log-normalizer that restores the logits, the output o = sum p v,
// and the rows by descending p (ties by lower row) for the oracle.
struct DenseReference {
  std::vector<double> p, o;
  std::vector<int64_t> order;
  double log_normalizer = 0;
  void compute(const float* q, const float* K, const float* V, int64_t E, int64_t d);
};

// One receipt measured against the reference: rows kept (candidates + always included, below E),
// retained mass, the oracle's mass with as many rows, recall of the oracle's support, and the
// error of the renormalized output over the kept rows.
struct ReceiptMetrics {
  int64_t rows = 0;
  double retained = 0, oracle = 0, recall = 0, error = 0, relative_error = 0, fraction = 0, output_norm = 0;
  std::vector<char> kept;  // per support row
  void measure(const DenseReference& ref, const CandidateReceipt& rc, const float* V, int64_t E, int64_t d);
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
