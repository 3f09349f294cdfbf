#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "lsh/lsh.h"
#include "impl/eval_parts.h"
#include "kvtool/prng.h"
#include "kvtool/eval.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "reference_scorer.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

void lsh_dump(const std::string& path, int64_t tokens = 400, int64_t d = 16, int64_t layers = 2) {
  kind_dump(path, tokens, 21, 16, d, layers);
}

BuildOptions opts(const std::string& out, int threads = 1) { return quiet_build(out, threads, 5); }

}  // namespace

TEST_CASE("lsh inclusion probability equals brute-force enumeration of collision patterns") {
  for (int64_t L : {1, 3, 6, 10})
    for (int64_t K : {1, 4, 10})
      for (int64_t c : {1, 2, 3})
        for (double cosv : {-0.5, 0.0, 0.3, 0.9, 0.999}) {
          if (c > L) continue;
          double P = std::pow(1.0 - std::acos(cosv) / M_PI, static_cast<double>(K));
          double brute = 0;
          for (uint32_t mask = 0; mask < (1u << L); ++mask) {
            int hits = __builtin_popcount(mask);
            if (hits >= c) brute += std::pow(P, hits) * std::pow(1 - P, static_cast<double>(L - hits));
          }
          INFO("L=" << L << " K=" << K << " c=" << c << " cos=" << cosv);
          CHECK(lsh_inclusion_probability(cosv, K, L, c) == Approx(brute).margin(1e-12).epsilon(1e-9));
        }
  // c = 2 closed form against the general formula at a large L.
  CHECK(lsh_inclusion_probability(0.7, 10, 150, 2) ==
        Approx(1 - std::pow(1 - std::pow(1 - std::acos(0.7) / M_PI, 10), 149) *
                       (1 + 149 * std::pow(1 - std::acos(0.7) / M_PI, 10))));
}

TEST_CASE("merging two partial softmax states equals attention over the union") {
  SplitMix64 g(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(g.below(40)), d = 5;
    std::vector<double> z(n);
    std::vector<float> v(static_cast<size_t>(n * d));
    for (auto& x : z) x = 30 * g.normal();  // large logits: max-subtraction matters
    for (auto& x : v) x = static_cast<float>(g.normal());
    eval::SoftmaxState all(d), a(d), b(d);
    for (int i = 0; i < n; ++i) {
      all.add(z[i], v.data() + i * d);
      (g.below(2) ? a : b).add(z[i], v.data() + i * d);
    }
    a.merge(b);
    // Reference: plain softmax with the true maximum.
    double mx = *std::max_element(z.begin(), z.end()), s = 0;
    std::vector<double> o(d, 0.0);
    for (int i = 0; i < n; ++i) {
      double e = std::exp(z[i] - mx);
      s += e;
      for (int t = 0; t < d; ++t) o[t] += e * v[i * d + t];
    }
    auto om = a.output(), oa = all.output();
    for (int t = 0; t < d; ++t) {
      CHECK(om[t] == Approx(o[t] / s).margin(1e-12));
      CHECK(oa[t] == Approx(o[t] / s).margin(1e-12));
    }
  }
}

TEST_CASE("lsh build: deterministic, CSR tables exact for K up to 16, projections regenerate from the seed") {
  TempDir tmp;
  lsh_dump(tmp.file("d.h5"));
  LshParams p;
  p.bits = 6;
  p.tables = 12;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi"), 1), LshBuilder(p));
  build_artifact(tmp.file("d.h5"), opts(tmp.file("b.kvi"), 3), LshBuilder(p));
  CHECK(read_bytes(tmp.file("a.kvi")) == read_bytes(tmp.file("b.kvi")));
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), vo));
  for (int64_t K : {1, 11, 12, 16}) {
    LshParams pk;
    pk.bits = K;
    pk.tables = 3;
    std::string out = tmp.file("k" + std::to_string(K) + ".kvi");
    build_artifact(tmp.file("d.h5"), opts(out), LshBuilder(pk));
    CHECK_NOTHROW(verify_artifact(out, {}));
    // Every row sits in the bucket of its own float32 SimHash code, recomputed here.
    ArtifactReader r(out);
    auto mu = section_as<float>(r, "lsh_mu", 1, 1);
    auto w = section_as<float>(r, "lsh_projections", 1, 1);
    CHECK(w == lsh_projections(5, 1, 1, 16, K, 3));
    auto off = section_as<uint32_t>(r, "lsh_offsets", 1, 1);
    auto ids = section_as<uint16_t>(r, "lsh_ids", 1, 1);
    DumpReader d(tmp.file("d.h5"));
    std::vector<float> k(400 * 16);
    d.read_k(1, 1, 0, 400, k.data());
    const int64_t n = 400 - 4 - 64, buckets = int64_t{1} << K;
    int64_t wrong = 0;
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t b = 0; b < buckets; ++b)
        for (uint32_t i = off[t * (buckets + 1) + b]; i < off[t * (buckets + 1) + b + 1]; ++i) {
          int64_t row = ids[t * n + i];
          uint32_t code = 0;
          for (int64_t bit = 0; bit < K; ++bit) {
            float s = 0;
            for (int64_t j = 0; j < 16; ++j) s += (k[row * 16 + j] - mu[j]) * w[j * K * 3 + t * K + bit];
            code |= static_cast<uint32_t>(s > 0) << bit;
          }
          wrong += code != static_cast<uint32_t>(b);
        }
    INFO("K=" << K);
    CHECK(wrong == 0);
  }
  LshParams bad;
  bad.bits = 17;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), LshBuilder(bad)); }) == "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
}

TEST_CASE("lsh ids are uint32 once the covered rows exceed 65536") {
  TempDir tmp;
  SynthOptions o;
  o.layers = 1;
  o.kv_heads = 1;
  o.q_heads = 1;
  o.head_dim = 4;
  o.tokens = 66000;
  o.seed = 2;
  o.dtype = DType::f16;
  o.query_count = 0;
  synth_dump(o, {}, tmp.file("long.h5"));
  LshParams p;
  p.bits = 4;
  p.tables = 2;
  build_artifact(tmp.file("long.h5"), opts(tmp.file("a.kvi")), LshBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  CHECK(r.find("lsh_ids", 0, 0)->dtype == "u32");
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), {}));
}

TEST_CASE("lsh queries emit exactly the rows with >= c collisions, with their inclusion probabilities") {
  TempDir tmp;
  lsh_dump(tmp.file("d.h5"));
  LshParams p;
  p.bits = 4;
  p.tables = 20;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), LshBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  auto mu = section_as<float>(r, "lsh_mu", 0, 1);
  auto w = section_as<float>(r, "lsh_projections", 0, 1);
  DumpReader d(tmp.file("d.h5"));
  std::vector<float> k(400 * 16), q(16);
  d.read_k(0, 1, 0, 400, k.data());
  for (int j = 0; j < 16; ++j) q[j] = std::sin(1.0f + static_cast<float>(j));
  KeyRows keys{k.data(), 400, 16};
  SelectorSet sel(r);
  for (int64_t c : {1, 2, 5}) {
    CandidateReceipt rc = sel.query(0, 3, q.data(), 399, *sel.params({{"min_collisions", std::to_string(c)}}), &keys);
    REQUIRE(rc.inclusion.size() == rc.candidates.size());
    std::vector<int64_t> expect;
    auto code = [&](const float* x, int64_t t, bool center) {
      uint32_t cd = 0;
      for (int64_t b = 0; b < 4; ++b) {
        float s = 0;
        for (int64_t j = 0; j < 16; ++j) s += (x[j] - (center ? mu[j] : 0.f)) * w[j * 80 + t * 4 + b];
        cd |= static_cast<uint32_t>(s > 0) << b;
      }
      return cd;
    };
    for (int64_t row = 4; row < 336; ++row) {
      int hits = 0;
      for (int64_t t = 0; t < 20; ++t) hits += code(k.data() + row * 16, t, true) == code(q.data(), t, false);
      if (hits >= c) expect.push_back(row);
    }
    INFO("c=" << c);
    CHECK(rc.candidates == expect);
    // Inclusion probabilities as the reference scorer derives them from the keys (§5.5).
    RefQuery rq;
    rq.min_collisions = c;
    CHECK(compare_with_reference(rc, reference_query(r, 0, 3, q.data(), 399, rq, &keys)) == "");
  }
}

TEST_CASE("lsh verify rejects broken tables, foreign projections and non-finite means") {
  TempDir tmp;
  lsh_dump(tmp.file("d.h5"), 200);
  LshParams p;
  p.bits = 5;
  p.tables = 4;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), LshBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  forge_artifact(r, tmp.file("off.kvi"), 1, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "lsh_offsets") {
      uint32_t x = 7;
      std::memcpy(b.data() + 4 * 3, &x, 4);  // non-monotone
    }
  });
  forge_artifact(r, tmp.file("ids.kvi"), 1, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "lsh_ids") std::memcpy(b.data() + 2, b.data(), 2);  // a row twice in table 0
  });
  forge_artifact(r, tmp.file("proj.kvi"), 1, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "lsh_projections") b[10] ^= 0x10;
  });
  forge_artifact(r, tmp.file("mu.kvi"), 1, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "lsh_mu") {
      float x = INFINITY;
      std::memcpy(b.data(), &x, 4);
    }
  });
  CHECK(reason_of([&] { verify_artifact(tmp.file("off.kvi"), {}); }) == "BUCKET_TABLE_INVALID");
  CHECK(reason_of([&] { verify_artifact(tmp.file("ids.kvi"), {}); }) == "BUCKET_TABLE_INVALID");
  CHECK(reason_of([&] { verify_artifact(tmp.file("proj.kvi"), {}); }) == "PROJECTION_MISMATCH");
  CHECK(reason_of([&] { verify_artifact(tmp.file("mu.kvi"), {}); }) == "NON_FINITE");
}

TEST_CASE("lsh eval reports the estimator next to plain renormalization") {
  TempDir tmp;
  lsh_dump(tmp.file("d.h5"));
  LshParams p;
  p.bits = 3;
  p.tables = 30;
  BuildOptions o = opts(tmp.file("a.kvi"));
  o.prefix = 380;
  build_artifact(tmp.file("d.h5"), o, LshBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  DumpReader d(tmp.file("d.h5"));
  EvalOptions eo;
  eo.sweep["min_collisions"] = {"1", "2", "30"};
  json e = evaluate(r, d, eo).to_json();
  REQUIRE(e["budgets"].size() == 3);
  // Eval's retained mass and oracle equal a recomputation from the receipts and dense softmax;
  // the sampled rows hold more mass than as many evenly spaced rows (query-independent).
  SelectorSet sel(r);
  const char* cs[] = {"1", "2", "30"};
  const double margin[] = {0.01, 0.03, -1};  // measured gaps 0.020 and 0.060; c = T samples almost nothing
  for (size_t i = 0; i < 3; ++i) {
    const json& b = e["budgets"][i];
    CHECK(b["selector"]["min_collisions"] == std::stoi(cs[i]));
    CHECK(b.contains("estimator_output_error_mean"));
    const QualityMeans qm = recompute_quality(r, d, sel, *sel.params({{"min_collisions", cs[i]}}));
    INFO("c=" << cs[i] << " retained " << qm.retained << " oracle " << qm.oracle << " evenly spaced " << qm.spaced);
    CHECK(b["retained_mass_mean"].get<double>() == Approx(qm.retained).epsilon(1e-9));
    CHECK(b["oracle_retained_mass_mean"].get<double>() == Approx(qm.oracle).epsilon(1e-9));
    if (margin[i] > 0) CHECK(qm.retained > qm.spaced + margin[i]);
  }
  // More required collisions sample fewer rows.
  CHECK(e["budgets"][0]["sampled_fraction_mean"].get<double>() >=
        e["budgets"][1]["sampled_fraction_mean"].get<double>());
  CHECK(e["budgets"][1]["sampled_fraction_mean"].get<double>() >=
        e["budgets"][2]["sampled_fraction_mean"].get<double>());
}
