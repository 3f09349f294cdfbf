// `kvtool eval` spreads (layer, kv head) parts over worker threads: the report and the per-query
// records must be the same whatever the count (lib/offline/src/eval.cpp, run_passes), for a kind
// with one setting, one with several (squeeze) and the sampling estimator (lsh).
#include <catch2/catch.hpp>

#include "kvtool/builder.h"
#include "kvtool/eval.h"
#include "kvtool/kind_builders.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

std::string records_text(const std::vector<EvalRecord>& rs) {
  std::string out;
  for (const auto& r : rs)
    out += json{r.selector,
                r.layer,
                r.q_head,
                r.kv_head,
                r.position,
                r.selected_rows,
                r.selected_fraction,
                r.retained_mass,
                r.oracle_retained_mass,
                r.recall_support,
                r.output_error,
                r.relative_output_error,
                r.estimator_output_error}
               .dump() +
           "\n";
  return out;
}

}  // namespace

TEST_CASE("eval: the same report and records for 1, 2 and 5 threads") {
  TempDir tmp;
  kind_dump(tmp.file("d.h5"), 300, 9, 40, 16, 3);  // 3 layers x 2 kv heads: 6 parts
  for (const char* kind : {"pq", "squeeze", "lsh"}) {
    BuildOptions o = quiet_build(tmp.file(std::string(kind) + ".kvi"), 2, 4);
    o.prefix = 270;
    build_artifact(tmp.file("d.h5"), o, *make_builder(kind, json::object()));
    ArtifactReader r(tmp.file(std::string(kind) + ".kvi"));
    DumpReader d(tmp.file("d.h5"));
    std::string first_json, first_records;
    for (int threads : {1, 2, 5}) {
      EvalOptions eo;
      eo.threads = threads;
      std::vector<EvalRecord> records;
      const json rep = evaluate(r, d, eo, &records).to_json();
      const std::string js = rep.dump();
      INFO(kind << " threads " << threads);
      // 3 layers x 4 query heads x the 30 positions 270..299, per setting.
      REQUIRE(records.size() == 3 * 4 * 30 * rep["budgets"].size());
      if (threads == 1) {
        first_json = js;
        first_records = records_text(records);
        continue;
      }
      CHECK(js == first_json);
      CHECK(records_text(records) == first_records);
    }
  }
}
