// Files `kvtool eval` and `kvtool compare` write besides their reports: eval's per-query CSV,
// compare's per-setting CSV, and SVG curves of retained mass (compare: and output error) against
// selected fraction. All are written atomically (nothing at the path on failure). The SVGs are
// byte-deterministic: coordinates rounded to 0.1 px, no timestamps, file names without their
// directories.
#pragma once
#include <string>
#include <vector>

#include "kvtool/atomic_file.h"
#include "kvtool/compare.h"
#include "kvtool/eval.h"
#include "kvtool/eval_decode.h"
#include "kvtool/json.h"

namespace kvtool::cli {

// Each writes into an AtomicOutput the caller opened before the evaluation (so a bad path fails
// before the work) and commits it.
void write_eval_csv(AtomicOutput& out, const std::vector<EvalRecord>& records);
// `report` is evaluate()'s result (its settings' summaries and kind/coverage for the title).
void write_eval_plot(AtomicOutput& out, const EvalReport& report);
// One row per (artifact, setting): the table `kvtool compare` prints.
void write_compare_csv(AtomicOutput& out, const CompareReport& report);
// Two panels sharing the x axis (selected fraction): retained mass with the dense oracle, and
// relative output error; one curve per artifact and setting variant (QueryParams::label).
void write_compare_plot(AtomicOutput& out, const CompareReport& report);
// One row per decode result (`kvtool eval-decode`): the fields of its JSON.
void write_decode_csv(AtomicOutput& out, const EvalDecodeReport& report);
// Two panels sharing the x axis (selected fraction): mean KL(dense || sparse) and top-1 agreement;
// one curve per artifact and per baseline matched to it.
void write_decode_plot(AtomicOutput& out, const EvalDecodeReport& report);

}  // namespace kvtool::cli
