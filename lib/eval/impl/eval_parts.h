// The parts of `kvtool eval` (lib/offline/src/eval.cpp drives them): the dense reference of a block
// of queries, the metrics of one receipt against it, and the sampling estimator. Internal to offline.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/eval.h"
#include "kvtool/query.h"

namespace kvtool::eval {

// Row r's bit in a bitmap of rows (word r / 64, bit r % 64).
inline bool row_bit(const std::vector<uint64_t>& bits, int64_t r) {
  return (bits[static_cast<size_t>(r >> 6)] >> (r & 63)) & 1;
}

// One evaluated selector setting: the kind's parameters, its label (CSV) and summary keys.
struct Setting {
  std::unique_ptr<QueryParams> params;
  json selector;
  std::string label;
};

// Every combination of the swept values of the kind's query options (EvalOptions::sweep, else the
// kind's default sweep), first option outermost; USAGE for a value the kind refuses.
std::vector<Setting> eval_settings(const ArtifactReader& art, const KindSpec& kind, const EvalOptions& opt,
                                   int64_t indexed_rows);

// Asks the kernel for transparent huge pages on [p, p + bytes) (Linux; nothing elsewhere).
void advise_huge_pages(void* p, size_t bytes);

// Reserves room for n elements in a buffer the loop then fills for the first time: eval's buffers
// are tens of MiB per worker, and first touching them 4 KiB page by page cost about a tenth of
// the run at 32K rows (docs/reports/performance.md, "Scale": eval).
template <typename T>
void reserve_huge(std::vector<T>& v, size_t n) {
  if (v.capacity() >= n) return;
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
}

// The covered support [0, E) of one (layer, kv head), row-major [E, d] floats as read from the
// dump. The GEMMs take it in double a tile of rows at a time (the float -> double conversion is
// exact), so no double copy of the whole K and V is ever held.
struct DenseSupport {
  const float* K = nullptr;
  const float* V = nullptr;
  int64_t E = 0, d = 0;
  void load(const float* k, const float* v, int64_t rows, int64_t dim);
  static constexpr int64_t kTileRows = 2048;
  // Rows [r0, r0 + rows) of `m` (K or V) in double, into `tile`.
  const double* tile(const float* m, int64_t r0, int64_t rows, std::vector<double>& tile) const;
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
// metric within rounding of a plain double loop (docs/reports/performance.md, "Scale": eval).
struct DenseBlock {
  std::vector<double> P, O, log_normalizer;  // [n, E], [n, d], [n]
  std::vector<double> tile;                  // a tile of K or V in double
  int64_t n = 0, E = 0, d = 0;
  // Q: [count, d] double. With `oracle`, each row's oracle histogram is taken right after its
  // softmax, while the row is still in cache (it was a tenth of eval's time as a second pass).
  void compute(const double* Q, int64_t count, const DenseSupport& s, class OracleIndex* oracle = nullptr);
  DenseReference row(int64_t i) const {
    return {P.data() + i * E, O.data() + i * d, log_normalizer[static_cast<size_t>(i)]};
  }
  // Queries per block: at most 256, and at most 2^22 doubles (32 MiB) of probabilities.
  static int64_t block_rows(int64_t E);
};

// The oracle of every query of a block at any row count: each p's bucket (its sign, exponent and
// 4 leading mantissa bits: order-preserving, as p >= 0) and per query the rows and mass of each
// bucket. The oracle's rows are then whole buckets from the top, plus the largest p of one
// threshold bucket (a selection among its few rows), instead of a selection over all E per setting.
class OracleIndex {
 public:
  void build(const DenseBlock& b);  // start(b), then add_row for every row
  void start(const DenseBlock& b);  // sized for b's rows (b.n, b.E set)
  void add_row(int64_t i);          // row i of b, once its probabilities are final
  // Query i: the mass of the `rows` largest p (ties by lower row) and how many of those rows are
  // kept (`ids`: the kept rows, `kept`: their bitmap, row_bit).
  void measure(int64_t i, int64_t rows, const std::vector<int64_t>& ids, const std::vector<uint64_t>& kept,
               double& mass, int64_t& hits);
  static constexpr int64_t kBuckets = 2048;

 private:
  const DenseBlock* b_ = nullptr;
  std::vector<uint16_t> key_;   // [n, E]
  std::vector<int64_t> count_;  // [n, kBuckets]
  std::vector<double> mass_;    // [n, kBuckets]
  std::vector<int64_t> tied_;   // rows of the threshold bucket
};

// One receipt measured against the reference: rows kept (candidates + always included, below E),
// retained mass, the oracle's mass with as many rows (the `rows` largest p, ties by lower row),
// recall of the oracle's support; then (output()) the error of the renormalized output over the
// kept rows.
struct ReceiptMetrics {
  int64_t rows = 0;
  double retained = 0, oracle = 0, recall = 0, error = 0, relative_error = 0, fraction = 0, output_norm = 0;
  std::vector<uint64_t> kept;  // a bit per support row (row_bit)
  std::vector<int64_t> ids;    // the kept rows, ascending
  std::vector<double> w;       // p of each kept row (read once here, where P is scattered in memory)
  // Everything but the output error; query i of the block `oracle` was built on.
  void measure(const DenseReference& ref, const CandidateReceipt& rc, OracleIndex& oracle, int64_t i, int64_t E);
  // The output error from kept_out = sum over the kept rows of p v.
  void output(const DenseReference& ref, const double* kept_out, int64_t d);
};

// sum over the kept rows of p v for each query of a block under one setting: per query over its
// kept rows, or, when the block keeps enough rows that it is cheaper, as one dgemm of the
// probabilities masked to the kept rows against the contiguous V (gathering rows is bound by memory).
struct KeptOutputs {
  std::vector<double> out;     // [n, d]
  std::vector<double> masked;  // [n, kTileRows]: zero but while a tile's GEMM is set up
  std::vector<double> tile;    // a tile of V in double
  std::vector<size_t> next;    // per query: its first kept row at or after the tile
  // m[i].ids: query i's kept rows.
  void compute(const DenseBlock& b, const std::vector<ReceiptMetrics>& m, const DenseSupport& s);
  // A dgemm costs n E d multiply-adds at BLAS speed, gathering costs (kept rows) d at memory speed.
  static bool use_gemm(const std::vector<ReceiptMetrics>& m, int64_t n, int64_t E);
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
double sampled_output_error(const DenseReference& ref, const std::vector<uint64_t>& kept, const CandidateReceipt& rc,
                            const float* V, int64_t E, int64_t d);

}  // namespace kvtool::eval
