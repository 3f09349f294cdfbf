// Evaluation of an artifact's candidates against dense attention over a dump's recorded queries:
// retained attention mass, recall, output error, per budget / selector setting (docs/architecture.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/json.h"
#include "kvtool/query.h"

namespace kvtool {

struct EvalOptions {
  std::vector<Budget> budgets{Budget{}};
  std::vector<int64_t> min_collisions{2};  // selector settings of sampling kinds (lsh)
  std::vector<double> quantiles;           // threshold kinds (squeeze); empty: the artifact's quantiles
  std::string csv_path;   // per-query rows
  std::string plot_path;  // SVG: retained mass vs selected fraction
  bool quiet = true;
};

// Every layer of the artifact, every query head, every dumped query at or after coverage_end;
// support = the covered rows. Returns {"schema_version", "budgets": [...], ...}.
json evaluate(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt);

}  // namespace kvtool
