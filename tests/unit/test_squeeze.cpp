#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/eval.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "reference_scorer.h"
#include "squeeze/squeeze_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

// A prefix dump with queries for every position (the observation window needs them).
void sq_dump(const std::string& path, uint64_t seed = 31) { kind_dump(path, 500, seed, 200); }

BuildOptions opts(const std::string& out, int threads = 1) {
  BuildOptions b = quiet_build(out, threads);
  b.prefix = 420;
  return b;
}

RefQuery rq_hier_05() {
  RefQuery rq;
  rq.quantile = "0.5";
  return rq;
}

SqueezeParams params() {
  SqueezeParams p;
  p.percent_clusters = 10;
  p.observation_window = 60;
  return p;
}

}  // namespace

TEST_CASE("squeeze: deterministic, covering hierarchy, calibrated thresholds, shards merge to the same bytes") {
  TempDir tmp;
  sq_dump(tmp.file("d.h5"));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi"), 1), SqueezeBuilder(params()));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("b.kvi"), 3), SqueezeBuilder(params()));
  CHECK(read_bytes(tmp.file("a.kvi")) == read_bytes(tmp.file("b.kvi")));
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), vo));
  ArtifactReader r(tmp.file("a.kvi"));
  const json& th = r.manifest()["kind_data"]["thresholds"];
  REQUIRE(th.size() == 4);
  CHECK(th["0.5"].get<double>() <= th["0.7"].get<double>());
  CHECK(th["0.8"].get<double>() <= th["0.9"].get<double>());
  CHECK(r.find("sq_fine_centroids", 1, 1)->shape[0] == 36);  // floor(10% of 420 - 60)
  std::vector<std::string> shards;
  for (int i = 0; i < 2; ++i) {
    BuildOptions s = opts(tmp.file("s" + std::to_string(i) + ".kvi"));
    s.shard_index = i;
    s.shard_count = 2;
    build_artifact(tmp.file("d.h5"), s, SqueezeBuilder(params()));
    shards.push_back(s.output);
  }
  CHECK_FALSE(ArtifactReader(shards[0]).manifest()["kind_data"].contains("thresholds"));
  merge_artifacts({shards[1], shards[0]}, tmp.file("m.kvi"), "", true);
  CHECK(read_bytes(tmp.file("m.kvi")) == read_bytes(tmp.file("a.kvi")));
}

TEST_CASE("squeeze calibration survives keys scaled x100 (max-subtraction)") {
  TempDir tmp;
  sq_dump(tmp.file("d.h5"));
  copy_dump(tmp.file("d.h5"), tmp.file("big.h5"), {}, [](int64_t, int64_t, auto& k, auto&) {
    for (auto& x : k) x *= 100.f;
  });
  build_artifact(tmp.file("big.h5"), opts(tmp.file("a.kvi")), SqueezeBuilder(params()));
  ArtifactReader r(tmp.file("a.kvi"));
  for (auto& [q, t] : r.manifest()["kind_data"]["thresholds"].items()) {
    INFO(q);
    CHECK(std::isfinite(t.get<double>()));
  }
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), {}));
  SelectorSet sel(r);
  std::vector<float> q(16, 3.f);
  CandidateReceipt rc = sel.query(0, 1, q.data(), 450, *sel.params({{"quantile", "0.8"}, {"flat", "false"}}));
  for (size_t i = 1; i < rc.candidates.size(); ++i) CHECK(rc.candidates[i] > rc.candidates[i - 1]);
}

TEST_CASE("squeeze queries: hierarchical scores fewer centroids, flat scores all, thresholds order the selection") {
  TempDir tmp;
  sq_dump(tmp.file("d.h5"));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), SqueezeBuilder(params()));
  ArtifactReader r(tmp.file("a.kvi"));
  DumpReader d(tmp.file("d.h5"));
  std::vector<float> Q(200 * 16);
  d.read_q(1, 2, Q.data());
  SelectorSet sel(r);
  const float* q = Q.data() + 150 * 16;  // position 450
  CandidateReceipt flat = sel.query(1, 2, q, 450, *sel.params({{"quantile", "0.5"}, {"flat", "true"}}));
  CandidateReceipt hier = sel.query(1, 2, q, 450, *sel.params({{"quantile", "0.5"}, {"flat", "false"}}));
  CandidateReceipt strict = sel.query(1, 2, q, 450, *sel.params({{"quantile", "0.9"}, {"flat", "true"}}));
  CHECK(flat.centroids_scored == 36);
  // The exact count and rows the spec (formats/kinds-v1.md §6.6) gives, from the independent
  // reference scorer: G = 9 coarse centroids plus the children of the kept groups.
  RefQuery rq;
  rq.quantile = "0.5";
  const RefAnswer ref_hier = reference_query(r, 1, 2, q, 450, rq);
  rq.flat = true;
  const RefAnswer ref_flat = reference_query(r, 1, 2, q, 450, rq);
  CHECK(hier.centroids_scored == ref_hier.centroids_scored);
  CHECK(hier.centroids_scored < 36 + 9);  // this query prunes at least one coarse group
  CHECK(compare_with_reference(hier, ref_hier) == "");
  CHECK(compare_with_reference(flat, ref_flat) == "");
  CHECK(strict.candidates.size() < flat.candidates.size());
  CHECK(flat.selector["mode"] == "flat");
  CHECK(reason_of([&] { sel.query(1, 2, q, 450, *sel.params({{"quantile", "0.6"}, {"flat", "false"}})); }) == "USAGE");
  EvalOptions eo;
  eo.sweep["quantile"] = {"0.5", "0.9"};
  json e = evaluate(r, d, eo).to_json();
  REQUIRE(e["budgets"].size() == 4);
  // Eval's hierarchical mean equals the reference's over eval's queries (positions [420, 500)).
  double scored = 0, count = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 4; ++h) {
      d.read_q(l, h, Q.data());
      for (int64_t j = 120; j < 200; ++j, ++count)
        scored +=
            static_cast<double>(reference_query(r, l, h, Q.data() + j * 16, 300 + j, rq_hier_05()).centroids_scored);
    }
  INFO(e["budgets"].dump());
  CHECK(e["budgets"][0]["centroids_scored_mean"].get<double>() == Approx(scored / count).epsilon(1e-12));
  CHECK(e["budgets"][1]["centroids_scored_mean"].get<double>() == 36);
}

namespace {

// Every query of positions [419, 500), every query head and calibrated quantile: rule "bound"
// keeps every row flat keeps (formats/kinds-v1.md §6.6), and every 16th query equals the
// independent reference scorer, rule "factor" and flat too. Returns the queries checked.
int64_t check_bound_superset(const std::string& art, const std::string& dump) {
  ArtifactReader r(art);
  DumpReader d(dump);
  SelectorSet sel(r);
  std::vector<float> Q(200 * 16);
  int64_t n = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 4; ++h) {
      d.read_q(l, h, Q.data());
      for (int64_t j = 119; j < 200; ++j)
        for (const char* quant : {"0.5", "0.7", "0.8", "0.9"}) {
          const float* q = Q.data() + j * 16;
          INFO("layer " << l << " head " << h << " position " << 300 + j << " quantile " << quant);
          CandidateReceipt flat = sel.query(l, h, q, 300 + j, *sel.params({{"quantile", quant}, {"flat", "true"}}));
          CandidateReceipt bound = sel.query(l, h, q, 300 + j, *sel.params({{"quantile", quant}}));
          REQUIRE(std::includes(bound.candidates.begin(), bound.candidates.end(), flat.candidates.begin(),
                                flat.candidates.end()));
          CHECK(bound.selector["coarse_rule"] == "bound");
          if (n++ % 16) continue;
          RefQuery rq;
          rq.quantile = quant;
          CHECK(compare_with_reference(bound, reference_query(r, l, h, q, 300 + j, rq)) == "");
          rq.factor_rule = true;
          CandidateReceipt factor =
              sel.query(l, h, q, 300 + j, *sel.params({{"quantile", quant}, {"coarse_rule", "factor"}}));
          CHECK(compare_with_reference(factor, reference_query(r, l, h, q, 300 + j, rq)) == "");
          rq.flat = true;
          CHECK(compare_with_reference(flat, reference_query(r, l, h, q, 300 + j, rq)) == "");
        }
    }
  return n;
}

}  // namespace

TEST_CASE("squeeze rule bound keeps every row flat keeps, on plain and adversarial keys") {
  TempDir tmp;
  sq_dump(tmp.file("d.h5"));
  using Poke = std::function<void(int64_t, int64_t, std::vector<float>&, std::vector<float>&)>;
  const std::vector<std::pair<std::string, Poke>> variants = {
      {"plain", {}},
      // Outlier keys far from every centroid: large group radii.
      {"outliers",
       [](int64_t, int64_t, auto& k, auto&) {
         for (size_t i = 0; i < k.size(); i += 37 * 16)
           for (size_t t = 0; t < 16 && i + t < k.size(); ++t) k[i + t] *= 40.f;
       }},
      // Logits in the thousands (x100) and far beyond (x1e4): the bounds' exponents sit hundreds
      // below their maximum, where exp underflows into subnormals (formats §6.6's 2^-1022 rule).
      {"x100",
       [](int64_t, int64_t, auto& k, auto&) {
         for (auto& x : k) x *= 100.f;
       }},
      {"x1e4",
       [](int64_t, int64_t, auto& k, auto&) {
         for (auto& x : k) x *= 1e4f;
       }},
      // Runs of identical keys (zero radii, tied scores) and near-duplicate keys.
      {"ties", [](int64_t, int64_t, auto& k, auto&) {
         for (size_t i = 16; i < k.size(); ++i) k[i] = (i / 16) % 5 ? k[i - 16] : k[i] * 1e-3f + 0.5f;
       }}};
  for (const auto& [name, poke] : variants) {
    INFO(name);
    const std::string dump = tmp.file(name + ".h5"), art = tmp.file(name + ".kvi");
    copy_dump(tmp.file("d.h5"), dump, {}, poke);
    build_artifact(dump, opts(art), SqueezeBuilder(params()));
    CHECK(check_bound_superset(art, dump) == 2 * 4 * 81 * 4);
  }
}

TEST_CASE("squeeze binds the prefix tokens, verify rejects forged hierarchies and thresholds, queries are required") {
  TempDir tmp;
  sq_dump(tmp.file("d.h5"));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), SqueezeBuilder(params()));
  {  // same K/V, one prefix token changed
    DumpReader r(tmp.file("d.h5"));
    DumpSpec s;
    s.id = r.info().id;
    s.geo = r.info().geo;
    s.geo.q_tokens = 0;
    DumpWriter w(tmp.file("tok.h5"), s);
    std::vector<float> k(500 * 16), v(500 * 16);
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t h = 0; h < 2; ++h) {
        r.read_k(l, h, 0, 500, k.data());
        r.read_v(l, h, 0, 500, v.data());
        w.write_kv(l, h, k.data(), v.data());
      }
    auto t = r.tokens();
    t[17] += 1;
    w.write_tokens(t);
    w.commit();
  }
  VerifyOptions vo;
  vo.source = tmp.file("tok.h5");
  CHECK(reason_of([&] { verify_artifact(tmp.file("a.kvi"), vo); }) == "PREFIX_MISMATCH");
  ArtifactReader r(tmp.file("a.kvi"));
  forge_artifact(r, tmp.file("parent.kvi"), 0, 1, [](const SectionEntry& s, auto& b) {
    if (s.name == "sq_parent") {
      uint32_t x = 999;
      std::memcpy(b.data(), &x, 4);
    }
  });
  forge_artifact(
      r, tmp.file("th.kvi"), 0, 1, [](const SectionEntry&, auto&) {}, [](json& kd) { kd["thresholds"]["0.8"] = 0.5; });
  forge_artifact(r, tmp.file("lab.kvi"), 0, 1, [](const SectionEntry& s, auto& b) {
    if (s.name == "sq_labels") b[0] ^= 1;
  });
  CHECK(reason_of([&] { verify_artifact(tmp.file("parent.kvi"), {}); }) == "HIERARCHY_NOT_COVERING");
  CHECK(reason_of([&] { verify_artifact(tmp.file("th.kvi"), {}); }) == "THRESHOLDS_MISMATCH");
  CHECK(reason_of([&] { verify_artifact(tmp.file("lab.kvi"), {}); }) == "MEMBERS_NOT_PARTITION");
  small_dump(tmp.file("noq.h5"));  // queries only in the last 8 positions
  BuildOptions o = opts(tmp.file("x.kvi"));
  o.prefix = 38;
  SqueezeParams p = params();
  p.observation_window = 10;  // window [28, 38) holds no dumped query
  CHECK(reason_of([&] { build_artifact(tmp.file("noq.h5"), o, SqueezeBuilder(p)); }) == "NO_QUERIES");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
  CHECK(reason_of([] { parse_quantiles("0.5,1.2"); }) == "USAGE");
}
