// Files `kvtool eval` writes besides its report: the per-query CSV and the SVG curve of retained
// mass against selected fraction. Both are written atomically (nothing at the path on failure).
#pragma once
#include <string>
#include <vector>

#include "kvtool/atomic_file.h"
#include "kvtool/eval.h"
#include "kvtool/json.h"

namespace kvtool::cli {

// Each writes into an AtomicOutput the caller opened before the evaluation (so a bad path fails
// before the work) and commits it.
void write_eval_csv(AtomicOutput& out, const std::vector<EvalRecord>& records);
// `report` is evaluate()'s result (its settings' summaries and kind/coverage for the title).
void write_eval_plot(AtomicOutput& out, const EvalReport& report);

}  // namespace kvtool::cli
