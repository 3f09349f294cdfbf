#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "clusterkv/clusterkv_builder.h"
#include "pq/pq_builder.h"
#include "pq/pq_aniso.h"
#include "kvtool/eval.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "reference_scorer.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

// L=2, H_kv=2, H_q=4, d=16, T=300 f32, queries of the last 40 positions.
void pq_dump(const std::string& path, uint64_t seed = 5, int64_t tokens = 300) { kind_dump(path, tokens, seed, 40); }

// The reference's 32 sink rows (the row counts below assume them; the default is 1, checked in
// "pq and clusterkv default to 1 sink row").
BuildOptions opts(const std::string& out, int threads = 1) {
  BuildOptions o = quiet_build(out, threads, 3);
  o.sink = 32;
  return o;
}

PqParams small_pq() {
  PqParams p;
  p.subspaces = 4;
  p.bits = 4;
  p.iters = 10;
  p.codebook_dtype = "f32";  // the checks read the codebooks as f32
  return p;
}

}  // namespace

TEST_CASE("pq and clusterkv default to 1 sink row") {
  // Fewer fixed first rows than the references' 32 / 16 and more index-chosen ones retained more at
  // equal attended rows on every shared model and prefix (docs/reports/defaults-sweep.md, "Sinks").
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  build_artifact(tmp.file("d.h5"), quiet_build(tmp.file("pq.kvi"), 1, 3), PqBuilder(small_pq()));
  ClusterKvParams cp;
  cp.tokens_per_cluster = 8;
  build_artifact(tmp.file("d.h5"), quiet_build(tmp.file("ckv.kvi"), 1), ClusterKvBuilder(cp));
  for (const char* f : {"pq.kvi", "ckv.kvi"}) {
    ArtifactReader r(tmp.file(f));
    CHECK(r.manifest()["params"]["sink"] == 1);
    SelectorSet sel(r);
    std::vector<float> q(16, 0.1f);
    const CandidateReceipt rc = sel.query(0, 0, q.data(), 299, *sel.params({{"budget", "8"}}));
    CHECK(rc.always_included == std::vector<int64_t>({0}));
  }
}

TEST_CASE("pq build is byte-identical whatever the thread count, and verifies against its dump") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions a = opts(tmp.file("t1.kvi"), 1);
  a.prefix = 260;
  BuildOptions b = a;
  b.output = tmp.file("t3.kvi");
  b.threads = 3;
  BuildSummary ja = build_artifact(tmp.file("d.h5"), a, PqBuilder(small_pq()));
  build_artifact(tmp.file("d.h5"), b, PqBuilder(small_pq()));
  CHECK(read_bytes(tmp.file("t1.kvi")) == read_bytes(tmp.file("t3.kvi")));
  CHECK(ja.to_json()["parts"] == 4);
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("t1.kvi"), vo));
  ArtifactReader r(tmp.file("t1.kvi"));
  CHECK(r.manifest()["params"]["sink"] == 32);
  CHECK(r.manifest()["params"]["subspaces"] == 4);
  CHECK(r.find("pq_codes", 1, 1)->dtype == "u8");
  CHECK(r.find("pq_codes", 1, 1)->shape == std::vector<int64_t>({260 - 32, 4}));
}

TEST_CASE("pq codes are the nearest centroid of the actual key rows") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions o = opts(tmp.file("a.kvi"));
  o.local = 10;
  build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq()));
  ArtifactReader r(tmp.file("a.kvi"));
  DumpReader d(tmp.file("d.h5"));
  auto cb = r.read_section(*r.find("pq_centroids", 0, 1));
  auto codes = r.read_section(*r.find("pq_codes", 0, 1));
  const float* c = reinterpret_cast<const float*>(cb.data());
  std::vector<float> k(300 * 16);
  d.read_k(0, 1, 0, 300, k.data());
  const int64_t rb = 32, re = 290, m = 4, ks = 16, ds = 4;
  REQUIRE(codes.size() == static_cast<size_t>((re - rb) * m));
  int64_t mismatches = 0;
  for (int64_t i = rb; i < re; ++i)
    for (int64_t j = 0; j < m; ++j) {
      int64_t best = 0;
      double bd = 1e300;
      for (int64_t cc = 0; cc < ks; ++cc) {
        double dist = 0;
        for (int64_t t = 0; t < ds; ++t) {
          double diff = k[i * 16 + j * ds + t] - c[(j * ks + cc) * ds + t];
          dist += diff * diff;
        }
        if (dist < bd - 1e-9) bd = dist, best = cc;
      }
      mismatches += codes[(i - rb) * m + j] != best;
    }
  CHECK(mismatches == 0);
}

TEST_CASE("parts with at most 2^b indexed rows stay dense, b > 8 uses uint16 codes") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions o = opts(tmp.file("dense.kvi"));
  o.prefix = 40;  // 8 indexed rows <= 16 centroids
  build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq()));
  ArtifactReader r(tmp.file("dense.kvi"));
  CHECK(r.sections().empty());
  CHECK(r.manifest()["kind_data"]["parts"][0]["dense"] == true);
  CHECK_NOTHROW(verify_artifact(tmp.file("dense.kvi"), {}));
  SelectorSet sel(r);
  std::vector<float> q(16, 0.5f);
  CandidateReceipt rc = sel.query(0, 0, q.data(), 45, *sel.params({{"budget", "2"}}));
  CHECK(rc.candidates.size() == 8);  // dense: every indexed row
  PqParams p = small_pq();
  p.bits = 9;
  pq_dump(tmp.file("long.h5"), 5, 600);  // 568 indexed rows > 2^9
  BuildOptions o2 = opts(tmp.file("b9.kvi"));
  build_artifact(tmp.file("long.h5"), o2, PqBuilder(p));
  ArtifactReader r9(tmp.file("b9.kvi"));
  REQUIRE(r9.find("pq_codes", 0, 0));
  CHECK(r9.find("pq_codes", 0, 0)->dtype == "u16");
  CHECK_NOTHROW(verify_artifact(tmp.file("b9.kvi"), {}));
}

TEST_CASE("bad pq inputs get their reasons and leave no output") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  PqParams p = small_pq();
  p.subspaces = 3;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), PqBuilder(p)); }) == "USAGE");
  p = small_pq();
  p.bits = 17;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), PqBuilder(p)); }) == "USAGE");
  BuildOptions o = opts(tmp.file("x.kvi"));
  o.layer_first = 2;
  o.layer_last = 3;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq())); }) == "USAGE");
  o = opts(tmp.file("x.kvi"));
  o.prefix = 301;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq())); }) == "USAGE");
  CHECK(reason_of([&] { build_artifact(tmp.file("none.h5"), opts(tmp.file("x.kvi")), PqBuilder(small_pq())); }) ==
        "IO_ERROR");
  copy_dump(tmp.file("d.h5"), tmp.file("nan.h5"), {}, [](int64_t l, int64_t h, auto&, auto& v) {
    if (l == 1 && h == 0) v[100 * 16] = NAN;
  });
  CHECK(reason_of([&] { build_artifact(tmp.file("nan.h5"), opts(tmp.file("x.kvi")), PqBuilder(small_pq())); }) ==
        "NON_FINITE");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
  for (const auto& e : fs::directory_iterator(tmp.path))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("sharded builds merge into the unsharded artifact, byte for byte, bad merges are refused") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions full = opts(tmp.file("full.kvi"), 2);
  build_artifact(tmp.file("d.h5"), full, PqBuilder(small_pq()));
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    BuildOptions s = opts(tmp.file("s" + std::to_string(i) + ".kvi"));
    s.shard_index = i;
    s.shard_count = 3;
    build_artifact(tmp.file("d.h5"), s, PqBuilder(small_pq()));
    shards.push_back(s.output);
    CHECK_NOTHROW(verify_artifact(s.output, {}));
  }
  merge_artifacts({shards[2], shards[0], shards[1]}, tmp.file("merged.kvi"), "", true);
  CHECK(read_bytes(tmp.file("merged.kvi")) == read_bytes(tmp.file("full.kvi")));
  CHECK(reason_of([&] { merge_artifacts({shards[0], shards[2]}, tmp.file("m.kvi"), "", true); }) == "MERGE_INCOMPLETE");
  CHECK(reason_of([&] { merge_artifacts({shards[0], shards[1]}, tmp.file("m.kvi"), "", true); }) == "MERGE_INCOMPLETE");
  CHECK(reason_of([&] {
          merge_artifacts({shards[0], shards[0], shards[1], shards[2]}, tmp.file("m.kvi"), "", true);
        }) == "MERGE_OVERLAP");
  BuildOptions other = opts(tmp.file("o1.kvi"));
  other.shard_index = 1;
  other.shard_count = 3;
  other.seed = 99;
  build_artifact(tmp.file("d.h5"), other, PqBuilder(small_pq()));
  CHECK(reason_of([&] {
          merge_artifacts({shards[0], tmp.file("o1.kvi"), shards[2]}, tmp.file("m.kvi"), "", true);
        }) == "MERGE_MISMATCH");
  pq_dump(tmp.file("d2.h5"), 6);
  BuildOptions os = opts(tmp.file("o2.kvi"));
  os.shard_index = 1;
  os.shard_count = 3;
  build_artifact(tmp.file("d2.h5"), os, PqBuilder(small_pq()));
  CHECK(reason_of([&] {
          merge_artifacts({shards[0], tmp.file("o2.kvi"), shards[2]}, tmp.file("m.kvi"), "", true);
        }) == "MERGE_MISMATCH");
  CHECK_FALSE(fs::exists(tmp.file("m.kvi")));
}

TEST_CASE("pq append encodes new rows with the old codebooks and refuses a changed prefix") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions o = opts(tmp.file("g1.kvi"));
  o.prefix = 200;
  build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq()));
  PqAppendSummary j = pq_append({tmp.file("g1.kvi"), tmp.file("d.h5"), tmp.file("g2.kvi"), 260, "", true});
  CHECK(j.append.index_generation == 2);
  ArtifactReader a(tmp.file("g1.kvi")), b(tmp.file("g2.kvi"));
  CHECK(b.manifest()["index_generation"] == 2);
  CHECK(b.manifest()["selector_generation"] == a.manifest()["selector_generation"]);
  CHECK(b.source().coverage_end == 260);
  CHECK(b.manifest()["kind_data"]["generations"].size() == 2);
  auto ca = a.read_section(*a.find("pq_codes", 1, 0)), cb = b.read_section(*b.find("pq_codes", 1, 0));
  REQUIRE(cb.size() == static_cast<size_t>((260 - 32) * 4));
  CHECK(std::equal(ca.begin(), ca.end(), cb.begin()));
  CHECK(a.read_section(*a.find("pq_centroids", 1, 0)) == b.read_section(*b.find("pq_centroids", 1, 0)));
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("g2.kvi"), vo));
  copy_dump(tmp.file("d.h5"), tmp.file("changed.h5"), {}, [](int64_t l, int64_t h, auto& k, auto&) {
    if (l == 0 && h == 1) k[150 * 16 + 3] += 1.0f;
  });
  CHECK(reason_of([&] {
          pq_append({tmp.file("g1.kvi"), tmp.file("changed.h5"), tmp.file("g3.kvi"), 260, "", true});
        }) == "PAYLOAD_MISMATCH");
  CHECK(reason_of([&] {
          pq_append({tmp.file("g1.kvi"), tmp.file("d.h5"), tmp.file("g3.kvi"), 150, "", true});
        }) == "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("g3.kvi")));
}

TEST_CASE("pq verify rejects out-of-range codes and missing sections even with valid digests") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), PqBuilder(small_pq()));
  ArtifactReader r(tmp.file("a.kvi"));
  auto forge = [&](const std::string& out, bool bad_code, bool drop) {
    ArtifactWriter w(out, 0);
    bool first = true;
    for (const auto& s : r.sections()) {
      auto bytes = r.read_section(s);
      if (s.name == "pq_codes" && first) {
        first = false;
        if (drop) continue;
        if (bad_code) bytes[5] = 16;  // bits = 4: codes must be < 16
      }
      w.add_section(s.name, s.dtype, s.shape, bytes.data(), bytes.size(), s.layer, s.kv_head);
    }
    ManifestCore core;
    core.kind = r.kind();
    core.params = r.manifest()["params"];
    core.source = r.source();
    core.kind_data = r.manifest()["kind_data"];
    w.finish(core);
  };
  forge(tmp.file("code.kvi"), true, false);
  forge(tmp.file("drop.kvi"), false, true);
  CHECK(reason_of([&] { verify_artifact(tmp.file("code.kvi"), {}); }) == "CODE_OUT_OF_RANGE");
  CHECK(reason_of([&] { verify_artifact(tmp.file("drop.kvi"), {}); }) == "PART_INVALID");
}

TEST_CASE("queries return budgeted candidates plus sink, local and the uncovered tail, eval at full budget is exact") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions o = opts(tmp.file("a.kvi"));
  o.prefix = 260;
  o.local = 8;
  o.sink = 4;
  build_artifact(tmp.file("d.h5"), o, PqBuilder(small_pq()));
  ArtifactReader r(tmp.file("a.kvi"));
  SelectorSet sel(r);
  std::vector<float> q(16);
  for (int i = 0; i < 16; ++i) q[i] = std::sin(static_cast<float>(i));
  CandidateReceipt rc = sel.query(1, 3, q.data(), 270, *sel.params({{"budget", "0.1"}}));
  CHECK(rc.kv_head == 1);
  CHECK(rc.indexed_rows == 260 - 4 - 8);
  CHECK(rc.budget_rows == 25);
  CHECK(rc.candidates.size() == 25);
  for (size_t i = 1; i < rc.scores.size(); ++i) CHECK(rc.scores[i - 1] >= rc.scores[i]);
  for (int64_t id : rc.candidates) CHECK((id >= 4 && id < 252));
  // sink 0..3, local 252..259, tail 260..270
  CHECK(rc.always_included.size() == 4 + 8 + 11);
  CHECK(rc.always_included.front() == 0);
  CHECK(rc.always_included.back() == 270);
  CHECK(reason_of([&] { sel.query(1, 3, q.data(), 100, *sel.params({{"budget", "0.1"}})); }) == "USAGE");
  CHECK(Budget::parse("10%").rows(248) == 25);
  CHECK(Budget::parse("64").rows(248) == 64);
  CHECK(reason_of([] { Budget::parse("-1"); }) == "USAGE");
  CHECK(reason_of([] { Budget::parse("1.5"); }) == "USAGE");

  DumpReader d(tmp.file("d.h5"));
  EvalOptions eo;
  eo.sweep["budget"] = {"1.0%", "10%", std::to_string(260 - 12)};
  json e = evaluate(r, d, eo).to_json();
  REQUIRE(e["budgets"].size() == 3);
  // Full budget: every indexed row, in the order the independent reference scorer gives (any
  // selector retains all the mass here, so that alone would prove nothing).
  RefQuery all;
  all.budget_rows = 248;
  CandidateReceipt full_rc = sel.query(1, 3, q.data(), 270, *sel.params({{"budget", "248"}}));
  CHECK(compare_with_reference(full_rc, reference_query(r, 1, 3, q.data(), 270, all)) == "");
  CHECK(e["budgets"][2]["selected_fraction_mean"].get<double>() == Approx(1.0));
  // 10%: eval's retained mass and oracle equal a recomputation from the receipts and dense
  // softmax, and PQ beats a query-independent selector of the same size (evenly spaced rows).
  const QualityMeans qc = recompute_quality(r, d, sel, *sel.params({{"budget", "10%"}}));
  const json& ten = e["budgets"][1];
  INFO("pq " << qc.retained << " oracle " << qc.oracle << " evenly spaced " << qc.spaced);
  CHECK(ten["retained_mass_mean"].get<double>() == Approx(qc.retained).epsilon(1e-9));
  CHECK(ten["oracle_retained_mass_mean"].get<double>() == Approx(qc.oracle).epsilon(1e-9));
  CHECK(qc.retained > qc.spaced + 0.1);
  const json& small = e["budgets"][0];
  CHECK(small["queries"] == 2 * 4 * 40);
  CHECK(small["per_layer"].size() == 2);
  for (const char* k : {"retained_mass_mean", "retained_mass_p10", "oracle_retained_mass_mean", "recall_support_mean",
                        "output_error_mean", "selected_fraction_mean", "index_bytes", "selected_row_bytes_mean"})
    CHECK(small.contains(k));
}

namespace {

// Keys with a shared offset and unequal channel scales (as attention keys have), [n, d].
std::vector<float> skewed_rows(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < d; ++t) x[i * d + t] = (t % 3 == 0 ? 2.f : 0.5f) * g(rng) + (t < 2 ? 3.f : 0.f);
  return x;
}

// Nearest-centroid (L2) codes per subspace.
std::vector<int32_t> l2_codes(const pq::AnisoProblem& p, const std::vector<float>& cb) {
  std::vector<int32_t> codes(static_cast<size_t>(p.n * p.m));
  const int64_t ds = p.dsub();
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t j = 0; j < p.m; ++j) {
      double best = 1e300;
      for (int64_t c = 0; c < p.k; ++c) {
        double s = 0;
        for (int64_t t = 0; t < ds; ++t) {
          const double e = p.x[i * p.d + j * ds + t] - cb[(j * p.k + c) * ds + t];
          s += e * e;
        }
        if (s < best) best = s, codes[i * p.m + j] = static_cast<int32_t>(c);
      }
    }
  return codes;
}

// Codebooks [m, k, dsub] from k distinct rows (a fixed L2 start).
std::vector<float> rows_as_codebooks(const pq::AnisoProblem& p) {
  std::vector<float> cb(static_cast<size_t>(p.m * p.k * p.dsub()));
  for (int64_t j = 0; j < p.m; ++j)
    for (int64_t c = 0; c < p.k; ++c)
      for (int64_t t = 0; t < p.dsub(); ++t) cb[(j * p.k + c) * p.dsub() + t] = p.x[(3 * c) * p.d + j * p.dsub() + t];
  return cb;
}

}  // namespace

TEST_CASE("pq anisotropic encoding: eta 1 is the L2 code, otherwise no single subspace change lowers the loss") {
  const std::vector<float> x = skewed_rows(40, 8, 3);
  pq::AnisoProblem p{x.data(), 40, 8, 2, 4, 1.0};
  const std::vector<float> cb = rows_as_codebooks(p);
  std::vector<int32_t> codes = l2_codes(p, cb);
  const std::vector<int32_t> start = codes;
  pq::aniso_encode(p, cb.data(), pq::kEncodePasses, codes);
  CHECK(codes == start);  // eta 1: the loss is |r|^2, separable, minimized by the L2 codes
  p.eta = 9.0;
  const double before = pq::aniso_loss(p, cb.data(), codes);
  pq::aniso_encode(p, cb.data(), 50, codes);
  const double after = pq::aniso_loss(p, cb.data(), codes);
  CHECK(after < before);
  CHECK(codes != start);
  // Brute force over every single-subspace change of every row, on the summed loss.
  int64_t improvable = 0;
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t j = 0; j < p.m; ++j)
      for (int32_t c = 0; c < p.k; ++c) {
        std::vector<int32_t> alt = codes;
        alt[i * p.m + j] = c;
        if (pq::aniso_loss(p, cb.data(), alt) < after - 1e-9 * after) ++improvable;
      }
  CHECK(improvable == 0);
}

TEST_CASE("pq anisotropic training lowers the anisotropic loss below the L2 codebooks' and never raises it") {
  const std::vector<float> x = skewed_rows(300, 16, 7);
  pq::AnisoProblem p{x.data(), 300, 16, 4, 8, 6.0};
  std::vector<float> cb = rows_as_codebooks(p);
  std::vector<int32_t> codes = l2_codes(p, cb);
  // Lloyd (L2) to convergence first: the L2 codebooks the build starts from.
  pq::AnisoProblem l2 = p;
  l2.eta = 1.0;
  for (int it = 0; it < 30; ++it) {
    pq::aniso_update(l2, codes, cb.data());  // eta 1: the update is the mean of the rows
    codes = l2_codes(p, cb);
  }
  double last = pq::aniso_loss(p, cb.data(), codes);
  const double l2_loss = last;
  for (int it = 0; it < 8; ++it) {
    pq::aniso_update(p, codes, cb.data());
    const double u = pq::aniso_loss(p, cb.data(), codes);
    CHECK(u <= last * (1 + 1e-9));
    pq::aniso_encode(p, cb.data(), pq::kEncodePasses, codes);
    const double e = pq::aniso_loss(p, cb.data(), codes);
    CHECK(e <= u * (1 + 1e-9));
    last = e;
  }
  CHECK(last < 0.9 * l2_loss);
  // The update is the exact minimizer per codeword: moving one coordinate either way costs.
  for (int64_t c : {0, 5, 17, 30}) {
    for (float step : {1e-2f, -1e-2f}) {
      std::vector<float> moved = cb;
      moved[static_cast<size_t>(c)] += step;
      CHECK(pq::aniso_loss(p, moved.data(), codes) >= pq::aniso_loss(p, cb.data(), codes));
    }
  }
}

TEST_CASE("pq --loss anisotropic: params recorded, same bytes at 1 and 3 threads, codes differ from l2") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  PqParams an = small_pq();
  an.loss = "anisotropic";
  an.anisotropic_eta = 5.5;
  BuildOptions a = opts(tmp.file("a1.kvi"), 1), b = opts(tmp.file("a3.kvi"), 3), l = opts(tmp.file("l2.kvi"), 1);
  build_artifact(tmp.file("d.h5"), a, PqBuilder(an));
  build_artifact(tmp.file("d.h5"), b, PqBuilder(an));
  build_artifact(tmp.file("d.h5"), l, PqBuilder(small_pq()));
  CHECK(read_bytes(tmp.file("a1.kvi")) == read_bytes(tmp.file("a3.kvi")));
  ArtifactReader r(tmp.file("a1.kvi")), rl(tmp.file("l2.kvi"));
  CHECK(r.manifest()["params"]["loss"] == "anisotropic");
  CHECK(r.manifest()["params"]["anisotropic_eta"] == 5.5);
  CHECK(!rl.manifest()["params"].contains("loss"));  // l2 artifacts are as before
  CHECK(r.read_section(*r.find("pq_codes", 1, 0)) != rl.read_section(*rl.find("pq_codes", 1, 0)));
  PqParams bad = an;
  bad.anisotropic_eta = -1;
  CHECK_THROWS_AS(PqBuilder(bad).check(16), Error);
  bad = an;
  bad.loss = "cosine";
  CHECK_THROWS_AS(PqBuilder(bad).check(16), Error);
}

TEST_CASE("pq --loss anisotropic with derived eta: recorded per part, append encodes new rows with it") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));  // queries at positions 260..299
  PqParams an = small_pq();
  an.loss = "anisotropic";
  BuildOptions o = opts(tmp.file("a.kvi"));
  o.prefix = 250;  // no query before E - 1: nothing to derive eta from
  CHECK_THROWS_AS(build_artifact(tmp.file("d.h5"), o, PqBuilder(an)), Error);
  o.prefix = 290;
  build_artifact(tmp.file("d.h5"), o, PqBuilder(an));
  pq_append({tmp.file("a.kvi"), tmp.file("d.h5"), tmp.file("b.kvi"), 300, "", true});
  ArtifactReader r(tmp.file("b.kvi"));
  const json& parts = r.manifest()["kind_data"]["parts"];
  const json& pm = parts[3];
  const double eta = pm["anisotropic_eta"].get<double>();
  CHECK(eta > 0);
  CHECK(parts[0]["anisotropic_eta"].get<double>() != eta);  // per part
  const int64_t layer = pm["layer"], head = pm["kv_head"];
  auto cb = r.read_section(*r.find("pq_centroids", layer, head));
  auto stored = r.read_section(*r.find("pq_codes", layer, head));
  DumpReader d(tmp.file("d.h5"));
  std::vector<float> k(10 * 16);
  d.read_k(layer, head, 290, 300, k.data());
  const pq::AnisoProblem p{k.data(), 10, 16, 4, 16, eta};
  std::vector<float> c(cb.size() / 4);
  std::memcpy(c.data(), cb.data(), cb.size());
  const std::vector<int32_t> l2 = l2_codes(p, c);
  std::vector<int32_t> want = l2;
  pq::aniso_encode(p, c.data(), pq::kEncodePasses, want);
  CHECK(want != l2);  // so that the comparison below tells the two encodings apart
  for (int64_t i = 0; i < 10 * 4; ++i) CHECK(stored[(290 - 32) * 4 + i] == want[i]);
}

// Rewrites an artifact with `params` replaced (sections as they are): a forged manifest.
static void reparam(const std::string& in, const std::string& out, const json& params) {
  ArtifactReader r(in);
  ArtifactWriter w(out, 0);
  for (const auto& s : r.sections()) {
    auto bytes = r.read_section(s);
    w.add_section(s.name, s.dtype, s.shape, bytes.data(), bytes.size(), s.layer, s.kv_head);
  }
  ManifestCore core;
  core.kind = r.kind();
  core.params = params;
  core.source = r.source();
  core.kind_data = r.manifest()["kind_data"];
  w.finish(core);
}

TEST_CASE("pq --codebook-dtype f16: the f32 codebooks rounded, codes nearest on them, half the bytes, append") {
  TempDir tmp;
  pq_dump(tmp.file("d.h5"));
  BuildOptions o32 = opts(tmp.file("f32.kvi")), o16 = opts(tmp.file("f16.kvi")), o16b = opts(tmp.file("f16b.kvi"), 3);
  o32.prefix = o16.prefix = o16b.prefix = 200;
  PqParams p = small_pq();
  build_artifact(tmp.file("d.h5"), o32, PqBuilder(p));
  p.codebook_dtype = "f16";
  build_artifact(tmp.file("d.h5"), o16, PqBuilder(p));
  build_artifact(tmp.file("d.h5"), o16b, PqBuilder(p));
  CHECK(read_bytes(tmp.file("f16.kvi")) == read_bytes(tmp.file("f16b.kvi")));  // any thread count
  ArtifactReader a(tmp.file("f32.kvi")), b(tmp.file("f16.kvi"));
  CHECK(b.manifest()["params"]["codebook_dtype"] == "f16");
  CHECK_FALSE(a.manifest()["params"].contains("codebook_dtype"));  // f32 artifacts as before
  const SectionEntry* e = b.find("pq_centroids", 1, 0);
  REQUIRE(e);
  CHECK(e->dtype == "f16");
  CHECK(e->raw_size * 2 == a.find("pq_centroids", 1, 0)->raw_size);
  // The same k-means: every stored f16 value is the f32 codebook's, rounded to nearest.
  auto c32 = section_as<float>(a, "pq_centroids", 1, 0);
  auto c16 = section_as<uint16_t>(b, "pq_centroids", 1, 0);
  REQUIRE(c32.size() == c16.size());
  for (size_t i = 0; i < c32.size(); ++i) REQUIRE(c16[i] == f32_to_f16(c32[i]));
  // Codes: the nearest of the stored (rounded) centroids, per subspace.
  auto codes = section_as<uint8_t>(b, "pq_codes", 1, 0);
  DumpReader d(tmp.file("d.h5"));
  std::vector<float> k(300 * 16);
  d.read_k(1, 0, 0, 300, k.data());
  const int64_t rb = 32, m = 4, ks = 16, ds = 4;
  int64_t worse = 0;
  for (int64_t i = rb; i < 200; ++i)
    for (int64_t j = 0; j < m; ++j) {
      auto dist = [&](int64_t c) {
        double s = 0;
        for (int64_t t = 0; t < ds; ++t) {
          const double x = k[i * 16 + j * ds + t] - f16_to_f32(c16[(j * ks + c) * ds + t]);
          s += x * x;
        }
        return s;
      };
      double best = 1e300;
      for (int64_t c = 0; c < ks; ++c) best = std::min(best, dist(c));
      worse += dist(codes[(i - rb) * m + j]) > best + 1e-6;
    }
  CHECK(worse == 0);
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("f16.kvi"), vo));
  // Append keeps the f16 codebooks byte for byte and encodes on them.
  pq_append({tmp.file("f16.kvi"), tmp.file("d.h5"), tmp.file("g2.kvi"), 260, "", true});
  ArtifactReader g2(tmp.file("g2.kvi"));
  CHECK(g2.find("pq_centroids", 1, 0)->dtype == "f16");
  CHECK(g2.read_section(*g2.find("pq_centroids", 1, 0)) == b.read_section(*e));
  CHECK_NOTHROW(verify_artifact(tmp.file("g2.kvi"), vo));
  // A manifest that names another dtype than the sections hold, or no known dtype, is refused.
  json params = b.manifest()["params"];
  params.erase("codebook_dtype");
  reparam(tmp.file("f16.kvi"), tmp.file("says32.kvi"), params);
  CHECK(reason_of([&] { verify_artifact(tmp.file("says32.kvi"), {}); }) == "SHAPE_MISMATCH");
  params["codebook_dtype"] = "f64";
  reparam(tmp.file("f16.kvi"), tmp.file("f64.kvi"), params);
  CHECK(reason_of([&] { verify_artifact(tmp.file("f64.kvi"), {}); }) == "BAD_MANIFEST");
  p.codebook_dtype = "bf16";
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), PqBuilder(p)); }) == "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
}
