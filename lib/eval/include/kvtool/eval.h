// Evaluation of an artifact's candidates against dense attention over a dump's recorded queries:
// retained attention mass, recall, output error, per budget / selector setting (docs/architecture.md).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/json.h"
#include "kvtool/kinds.h"
#include "kvtool/query.h"
#include "kvtool/report.h"

namespace kvtool {

// Which dumped query positions (those at or after the coverage end) are evaluated: all of them,
// every k-th (value = k), or `value` drawn at random without replacement from `seed` (SplitMix64,
// kvtool/prng.h), so that a big dump evaluates in bounded time; the report records the sample.
struct PositionSample {
  enum Rule { all, every, random } rule = all;
  int64_t value = 0;
  uint64_t seed = 0;
  json to_json(const std::vector<int64_t>& evaluated) const;  // {"rule", "value", "seed", "positions"}
  // "all", "every:K" or "random:N" (K, N > 0); USAGE otherwise.
  static PositionSample parse(const std::string& text, uint64_t seed = 0);
};

struct EvalOptions {
  // Values to evaluate per query option of the artifact's kind (e.g. "budget" -> 0.05, 0.1, 0.2);
  // every combination is one setting. An option not named takes the kind's default sweep
  // (KindSpec::default_sweep) or its default value; naming one the kind does not take is USAGE.
  std::map<std::string, std::vector<std::string>> sweep;
  PositionSample positions;
  // One selection per KV head and position, from the mean of its query heads' queries
  // (group_mean_query), measured against each query head's dense attention: the rows a
  // grouped-query engine fetches once for the whole group.
  bool share_kv_head = false;
  bool quiet = true;
  // Worker threads over (layer, kv head) parts, each with single-threaded BLAS; the report and the
  // records are the same for any count. 0: std::thread::hardware_concurrency() (at least 1).
  int threads = 0;
};

// One evaluated query under one setting (a row of `kvtool eval --csv`).
struct EvalRecord {
  std::string selector;  // the setting's label ("0.1", "c=2", "q=0.8/hier")
  int64_t layer = 0, q_head = 0, kv_head = 0, position = 0, selected_rows = 0;
  double selected_fraction = 0, retained_mass = 0, oracle_retained_mass = 0, recall_support = 0, output_error = 0,
         relative_output_error = 0, estimator_output_error = 0;
};

// Means (and tails) of the metrics over a set of evaluated queries: all of a setting's, or one
// layer's. The optional ones exist for the kinds they apply to.
struct EvalStats {
  int64_t queries = 0;
  double retained_mass_mean = 0, retained_mass_p10 = 0, oracle_retained_mass_mean = 0, quality_ratio = 0,
         omitted_mass_mean = 0, recall_support_mean = 0, output_error_mean = 0, output_error_p90 = 0,
         relative_output_error_mean = 0, selected_fraction_mean = 0, selected_rows_mean = 0,
         selected_row_bytes_mean = 0;
  // Per KV head, the union of its query heads' selections at one position (the rows a grouped-query
  // engine must fetch), as a fraction of the support; equals selected_fraction_mean without GQA.
  double selected_fraction_kv_union_mean = 0;
  std::optional<double> centroids_scored_mean;  // centroid kinds
  std::optional<double> estimator_output_error_mean, estimator_relative_output_error_mean,
      sampled_fraction_mean;  // sampling kinds
  json to_json() const;
};

// One selector setting's results (an entry of --json "budgets").
struct EvalSetting {
  std::string label;  // the setting's short label ("0.1", "c=2", "q=0.8/hier")
  json selector;      // the kind's setting keys, plus kind and indexed_rows
  EvalStats overall;
  std::vector<std::pair<int64_t, EvalStats>> per_layer;  // (layer, stats)
  uint64_t index_bytes = 0, metadata_bytes = 0;
  json to_json() const;
};

struct EvalReport {
  std::string kind, artifact, source;
  SelectionMode mode = SelectionMode::budget_top_k;
  int64_t coverage_end = 0, indexed_rows = 0, always_included_rows = 0, layer_first = 0, layer_last = 0,
          selected_row_bytes_per_row = 0;
  uint64_t query_positions = 0;
  PositionSample positions;                  // the sample asked for
  bool share_kv_head = false;                // EvalOptions::share_kv_head
  std::vector<int64_t> positions_evaluated;  // the positions it gave, ascending
  std::vector<EvalSetting> settings;
  IndexBytes index;      // the artifact's index bytes against the K+V bytes it covers, as inspect reports
  json to_json() const;  // --json: {"schema_version", "kind", ..., "budgets": [...]}
};

// Every layer of the artifact, every query head, every dumped query at or after coverage_end;
// support = the covered rows. With `records`, also appends one record per (setting, query).
EvalReport evaluate(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt,
                    std::vector<EvalRecord>* records = nullptr);

// The settings evaluate() would sweep, parsed by the artifact's kind: USAGE for a bad option value
// (before any work, so that a caller evaluating several artifacts fails fast).
void check_eval_settings(const ArtifactReader& art, const EvalOptions& opt);

}  // namespace kvtool
