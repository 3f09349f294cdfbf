// An independent brute-force scorer for every queryable kind, written from formats/kinds-v1.md
// (§2.2, §2.6, §3.5, §4.5, §5.5, §6.6) with plain loops in double over the decoded sections. It
// shares no code with the library's selectors or kvtool/scoring.h: tests compare the answers of
// the library's query paths (host and device tiers of the pool, the file query path) with it, so
// that a bug in the shared scoring code cannot pass by agreeing with itself. The library scores
// pq and clusterkv in f32 and this scorer in f64, so selections may differ only among rows whose
// score ties the selection boundary within the stated tolerance; those rows are marked ambiguous.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/kinds.h"
#include "kvtool/query.h"

namespace kvtool::test {

struct RefQuery {
  double budget_fraction = 0.1;  // pq, clusterkv: rows min(n, llround(f·n)), unless budget_rows >= 0
  int64_t budget_rows = -1;      // pq, clusterkv: a row count min(c, n)
  int64_t min_collisions = 2;    // lsh
  std::string quantile;          // squeeze: key of kind_data.thresholds; empty: params.quantiles[0]
  bool flat = false;             // squeeze
  bool factor_rule = false;      // squeeze hierarchical: coarse_rule "factor" instead of "bound"
  bool squeeze_budget = false;   // squeeze: rank clusters to the budget above instead of a threshold
};

struct RefAnswer {
  std::string kind;
  std::vector<int64_t> ids;       // absolute rows, in the kind's result order
  std::vector<double> scores;     // score of each id
  std::vector<double> inclusion;  // lsh with keys: inclusion probability of each id
  std::vector<int64_t> always_included;
  int64_t centroids_scored = -1;  // squeeze
  int64_t begin = 0, end = 0;     // indexed rows [begin, end)
  std::vector<double> row_score;  // part-relative: the score a selected row would carry
  std::vector<char> ambiguous;    // part-relative: selected or not depends on rounding at the boundary
  std::vector<char> exact_score;  // part-relative: the library's score must equal row_score exactly (lsh)
  bool all_ambiguous = false;     // squeeze: a coarse group sat on its pruning threshold
  double tol = 0;                 // absolute score tolerance (f32 vs f64 arithmetic)
  double rel_tol = 0;             // relative score tolerance
  bool ranked = false;            // exactly the budget's rows, best first (pq, clusterkv, squeeze's budget)
};

// The answer formats/kinds-v1.md prescribes for one query. `keys` (rows [0, E) of the query's kv
// head) is needed for lsh inclusion probabilities only.
RefAnswer reference_query(const ArtifactReader& r, int64_t layer, int64_t q_head, const float* q, int64_t position,
                          const RefQuery& rq, const KeyRows* keys = nullptr);

// Empty when `got` agrees with `ref` (selection up to ambiguous rows, scores within tolerance,
// result order, always-included rows, inclusion probabilities); else what differs. `boundary`
// counts the rows that differed at the boundary.
std::string compare_with_reference(const CandidateReceipt& got, const RefAnswer& ref, int64_t* boundary = nullptr);

// Mean retained attention mass (dense softmax of q·k/sqrt(d) over rows [0, E), in double, as
// eval defines it) over the dump's queries at positions [E, T), every layer and query head, of:
// the receipts `sel` gives with `params`, the oracle (as many of the heaviest rows as the receipt
// keeps), and a query-independent selector of the same size (the receipt's always-included rows
// plus as many indexed rows, evenly spaced over [begin, end)).
struct QualityMeans {
  double retained = 0, oracle = 0, spaced = 0;
  int64_t queries = 0;
};
QualityMeans recompute_quality(const ArtifactReader& r, const DumpReader& d, SelectorSet& sel,
                               const QueryParams& params);

}  // namespace kvtool::test
