// Evaluation of an artifact's candidates against dense attention over a dump's recorded queries:
// retained attention mass, recall, output error, per budget / selector setting (docs/architecture.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/json.h"
#include "kvtool/query.h"

namespace kvtool {

struct EvalOptions {
  // Values to evaluate per query option of the artifact's kind (e.g. "budget" -> 0.05, 0.1, 0.2);
  // every combination is one setting. An option not named takes the kind's default sweep
  // (KindSpec::default_sweep) or its default value; naming one the kind does not take is USAGE.
  std::map<std::string, std::vector<std::string>> sweep;
  bool quiet = true;
};

// One evaluated query under one setting (a row of `kvtool eval --csv`).
struct EvalRecord {
  std::string selector;  // the setting's label ("0.1", "c=2", "q=0.8/hier")
  int64_t layer = 0, q_head = 0, kv_head = 0, position = 0, selected_rows = 0;
  double selected_fraction = 0, retained_mass = 0, oracle_retained_mass = 0, recall_support = 0, output_error = 0,
         relative_output_error = 0, estimator_output_error = 0;
};

// Every layer of the artifact, every query head, every dumped query at or after coverage_end;
// support = the covered rows. Returns {"schema_version", "budgets": [...], ...}; with `records`,
// also appends one record per (setting, query).
json evaluate(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt,
              std::vector<EvalRecord>* records = nullptr);

}  // namespace kvtool
