// compare() (lib/offline/src/compare.cpp): each artifact's report is evaluate()'s over the sweep
// compare_sweep() gives it (the kind's curve, or the named values of the options it takes); one
// oracle point per setting, by selected fraction; the binding and the options are checked first.
#include <catch2/catch.hpp>

#include "kvtool/builder.h"
#include "kvtool/compare.h"
#include "kvtool/kind_builders.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

void build(TempDir& tmp, const std::string& dump, const std::string& kind, const json& params) {
  BuildOptions o = quiet_build(tmp.file(kind + ".kvi"), 2, 4);
  o.prefix = 270;
  build_artifact(tmp.file(dump), o, *make_builder(kind, params));
}

}  // namespace

TEST_CASE("compare: every artifact as evaluate() over its kind's curve, the oracle points sorted") {
  TempDir tmp;
  kind_dump(tmp.file("d.h5"), 300, 9, 40, 16, 2);
  build(tmp, "d.h5", "pq", json::object());
  build(tmp, "d.h5", "squeeze", json::object());
  build(tmp, "d.h5", "lsh", {{"bits", 4}, {"tables", 3}});
  ArtifactReader pq(tmp.file("pq.kvi")), sq(tmp.file("squeeze.kvi")), lsh(tmp.file("lsh.kvi"));
  DumpReader d(tmp.file("d.h5"));
  CompareOptions opt;
  opt.threads = 2;
  using Sweep = std::map<std::string, std::vector<std::string>>;
  CHECK(compare_sweep(pq, opt) == Sweep{{"budget", {"0.02", "0.05", "0.1", "0.2", "0.3"}}});
  CHECK(compare_sweep(lsh, opt) == Sweep{{"min_collisions", {"1", "2", "3"}}});  // <= 3 tables
  CHECK(compare_sweep(sq, opt).empty());  // eval's default sweep: every quantile, hier and flat
  const CompareReport rep = compare({&pq, &sq, &lsh}, d, opt);
  REQUIRE(rep.artifacts.size() == 3);
  const std::vector<const ArtifactReader*> arts{&pq, &sq, &lsh};
  for (size_t i = 0; i < arts.size(); ++i) {
    const CompareArtifact& got = rep.artifacts[i];
    EvalOptions eo = opt;
    eo.sweep = compare_sweep(*arts[i], opt);
    CHECK(got.report.to_json() == evaluate(*arts[i], d, eo).to_json());
    CHECK(got.identity["path"] == arts[i]->path());
    CHECK(got.identity["kind"] == arts[i]->kind());
  }
  CHECK(rep.artifacts[1].report.settings.size() == 2 * sq.manifest()["params"]["quantiles"].size());
  REQUIRE(rep.oracle.size() == 5 + rep.artifacts[1].report.settings.size() + 3);
  for (size_t i = 1; i < rep.oracle.size(); ++i)
    CHECK(rep.oracle[i - 1].selected_fraction <= rep.oracle[i].selected_fraction);
  CHECK(rep.to_json()["oracle"].size() == rep.oracle.size());

  opt.sweep = {{"budget", {"0.1"}}};  // pq only; the others keep their curves
  const CompareReport one = compare({&pq, &lsh}, d, opt);
  CHECK(one.artifacts[0].report.settings.size() == 1);
  CHECK(one.artifacts[1].report.settings.size() == 3);
  CHECK(one.artifacts[0].report.settings[0].overall.retained_mass_mean ==
        rep.artifacts[0].report.settings[2].overall.retained_mass_mean);
}

TEST_CASE("compare: no artifact, an option none takes, another dump's artifact (named)") {
  TempDir tmp;
  kind_dump(tmp.file("d.h5"), 300, 9, 40, 16, 2);
  kind_dump(tmp.file("e.h5"), 300, 10, 40, 16, 2);
  build(tmp, "e.h5", "pq", json::object());
  ArtifactReader pq(tmp.file("pq.kvi"));
  DumpReader d(tmp.file("d.h5")), e(tmp.file("e.h5"));
  CompareOptions opt;
  CHECK_THROWS_WITH(compare({}, e, opt), Catch::Contains("at least one artifact"));
  opt.sweep = {{"quantile", {"0.8"}}};
  CHECK_THROWS_WITH(compare({&pq}, e, opt), Catch::Contains("'quantile'"));
  opt.sweep.clear();
  try {
    compare({&pq}, d, opt);
    FAIL("an artifact of another dump was compared");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find(pq.path()) != std::string::npos);
    CHECK(err.exit_code() == ExitCode::invalid);
  }
}
