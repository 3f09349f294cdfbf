#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "lsh/lsh_builder.h"
#include "impl/eval_parts.h"
#include "kvtool/prng.h"
#include "kvtool/eval.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "kvtool/scoring.h"
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
    // Every row sits in the bucket of its own float32 SimHash code, recomputed here in the order
    // formats/kinds-v1.md §5.3 fixes (j increasing from 0, no FMA): exact, on any machine.
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
            volatile float s = 0;  // one rounding per product and per sum (no FMA, whatever the flags)
            for (int64_t j = 0; j < 16; ++j) {
              volatile float x = k[row * 16 + j] - mu[j];
              volatile float p = x * w[j * K * 3 + t * K + bit];
              s = s + p;
            }
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

// The tables do not depend on the instruction set the products run on (formats/kinds-v1.md §5.3):
// 77 columns (AVX-512: a masked tail; AVX2: a scalar tail) and 332 indexed rows (not a multiple of
// 6 or 4) build the same bytes at every SIMD level this CPU runs.
TEST_CASE("lsh build: the same bytes at every SIMD level") {
  namespace sc = kvtool::scoring;
  struct Restore {
    ~Restore() { sc::set_simd_level(sc::Simd::avx512); }  // the best the CPU runs
  } restore;
  TempDir tmp;
  lsh_dump(tmp.file("d.h5"));
  LshParams p;
  p.bits = 7;
  p.tables = 11;
  std::vector<uint8_t> first;
  for (int level = 0; level <= static_cast<int>(sc::simd_supported()); ++level) {
    sc::set_simd_level(static_cast<sc::Simd>(level));
    const std::string out = tmp.file("l" + std::to_string(level) + ".kvi");
    build_artifact(tmp.file("d.h5"), opts(out), LshBuilder(p));
    INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)));
    if (level == 0)
      first = read_bytes(out);
    else
      CHECK(read_bytes(out) == first);
  }
}

namespace {

// The rows of bucket x of table t, decoded straight from the segmented sections (formats/kinds-v1.md,
// "lsh"): segment blocks aligned on multiples of 65536, u16 ids relative to the segment base.
std::vector<std::vector<int64_t>> decode_segmented(const std::vector<uint32_t>& off, const std::vector<uint16_t>& ids,
                                                   int64_t begin, int64_t end, int64_t L, int64_t B, int64_t t) {
  std::vector<std::vector<int64_t>> bucket(static_cast<size_t>(B));
  int64_t s = 0, at = 0;
  for (int64_t lo = begin; lo < end; ++s) {
    const int64_t base = lo / 65536 * 65536, hi = std::min(end, base + 65536), ns = hi - lo;
    const uint32_t* o = off.data() + (s * L + t) * (B + 1);
    for (int64_t x = 0; x < B; ++x)
      for (uint32_t i = o[x]; i < o[x + 1]; ++i) bucket[x].push_back(base + ids[at + t * ns + i]);
    at += L * ns;
    lo = hi;
  }
  return bucket;
}

// Rewrites a segmented artifact in the layout lsh artifacts had before params.id_layout: per table
// one CSR over all indexed rows, absolute u32 ids (E > 65536).
void write_legacy_layout(const ArtifactReader& r, const std::string& out, int64_t L, int64_t B) {
  const int64_t begin = 4, end = r.source().coverage_end - 64, n = end - begin;
  ArtifactWriter w(out, 3);
  for (const auto& e : r.sections()) {
    if (e.name == "lsh_ids") continue;
    if (e.name != "lsh_offsets") {
      auto b = r.read_section(e);
      w.add_section(e.name, e.dtype, e.shape, b.data(), b.size(), e.layer, e.kv_head);
      continue;
    }
    auto off = section_as<uint32_t>(r, "lsh_offsets", e.layer, e.kv_head);
    auto ids = section_as<uint16_t>(r, "lsh_ids", e.layer, e.kv_head);
    std::vector<uint32_t> loff(static_cast<size_t>(L * (B + 1)), 0), lids;
    for (int64_t t = 0; t < L; ++t) {
      auto bucket = decode_segmented(off, ids, begin, end, L, B, t);
      for (int64_t x = 0; x < B; ++x) {
        loff[t * (B + 1) + x + 1] = loff[t * (B + 1) + x] + static_cast<uint32_t>(bucket[x].size());
        for (int64_t id : bucket[x]) lids.push_back(static_cast<uint32_t>(id));
      }
    }
    w.add_section("lsh_offsets", "u32", {L, B + 1}, loff.data(), loff.size() * 4, e.layer, e.kv_head);
    w.add_section("lsh_ids", "u32", {L, n}, lids.data(), lids.size() * 4, e.layer, e.kv_head);
  }
  ManifestCore core;
  core.kind = r.kind();
  core.params = r.manifest()["params"];
  core.params.erase("id_layout");
  core.source = r.source();
  core.kind_data = r.manifest()["kind_data"];
  w.finish(core);
}

}  // namespace

// Covered rows past 65536: two segments ([4, 65536) and [65536, 69936)), u16 ids, and at most 2
// stored table bytes per (row, table); the buckets hold the rows whose SimHash codes they name;
// the same tables in the older u32 layout verify and answer identically.
TEST_CASE("lsh ids are u16 in 65536-row segments past 65536 covered rows, answering like the u32 layout") {
  TempDir tmp;
  SynthOptions o;
  o.layers = 1;
  o.kv_heads = 2;
  o.q_heads = 2;
  o.head_dim = 8;
  o.tokens = 70000;
  o.seed = 2;
  o.dtype = DType::f16;
  o.query_count = 0;
  synth_dump(o, {}, tmp.file("long.h5"));
  LshParams p;
  p.bits = 6;
  p.tables = 8;
  const int64_t L = 8, B = 64, d = 8, begin = 4, end = 70000 - 64, n = end - begin;
  build_artifact(tmp.file("long.h5"), opts(tmp.file("a.kvi")), LshBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  CHECK(r.manifest()["params"]["id_layout"] == "u16-segments");
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), {}));
  for (int64_t h = 0; h < 2; ++h) {
    const SectionEntry* ie = r.find("lsh_ids", 0, h);
    const SectionEntry* oe = r.find("lsh_offsets", 0, h);
    CHECK(ie->dtype == "u16");
    CHECK(ie->raw_size == static_cast<uint64_t>(2 * n * L));
    CHECK(oe->shape == std::vector<int64_t>({2 * L, B + 1}));
    // Ids: at most 2 stored bytes per (row, table) (u32 before: 4 raw). With the offsets (u32,
    // 4·(B+1) bytes per (segment, table)) the tables stay within 2 + 4·2·65/n_rows bytes.
    const double nl = static_cast<double>(n * L);
    INFO("stored bytes per (row, table): ids " << ie->stored_size / nl << ", with offsets "
                                               << (ie->stored_size + oe->stored_size) / nl);
    CHECK(static_cast<double>(ie->stored_size) / nl <= 2.0);
    CHECK(static_cast<double>(ie->stored_size + oe->stored_size) / nl <= 2.0 + 4.0 * 2 * (B + 1) / n);
  }
  // Bucket membership against the codes recomputed from the keys, for every 97th row whose
  // projections are clear of the hyperplanes (sgemm and this loop may round differently there).
  DumpReader dr(tmp.file("long.h5"));
  std::vector<float> k(static_cast<size_t>(70000 * d));
  dr.read_k(0, 1, 0, 70000, k.data());
  auto mu = section_as<float>(r, "lsh_mu", 0, 1);
  auto w = section_as<float>(r, "lsh_projections", 0, 1);
  auto off = section_as<uint32_t>(r, "lsh_offsets", 0, 1);
  auto ids = section_as<uint16_t>(r, "lsh_ids", 0, 1);
  int64_t checked = 0;
  for (int64_t t = 0; t < L; ++t) {
    auto bucket = decode_segmented(off, ids, begin, end, L, B, t);
    std::vector<int64_t> of(static_cast<size_t>(end), -1);
    for (int64_t x = 0; x < B; ++x)
      for (int64_t id : bucket[x]) of[id] = x;
    for (int64_t row = begin; row < end; row += 97) {
      int64_t code = 0;
      bool clear = true;
      for (int64_t b = 0; b < 6; ++b) {
        double s = 0, mag = 0;
        for (int64_t j = 0; j < d; ++j) {
          const double x = (static_cast<double>(k[row * d + j]) - mu[j]) * w[j * 6 * L + t * 6 + b];
          s += x, mag += std::fabs(x);
        }
        clear = clear && std::fabs(s) > 1e-4 * mag;
        code |= static_cast<int64_t>(s > 0) << b;
      }
      if (!clear) continue;
      ++checked;
      CHECK(of[row] == code);
    }
  }
  CHECK(checked > 4000);
  // The older layout of the same tables: verified by the legacy reader, same answers.
  write_legacy_layout(r, tmp.file("legacy.kvi"), L, B);
  ArtifactReader lr(tmp.file("legacy.kvi"));
  CHECK(lr.find("lsh_ids", 0, 0)->dtype == "u32");
  CHECK_NOTHROW(verify_artifact(tmp.file("legacy.kvi"), {}));
  SelectorSet a(r), b(lr);
  KeyRows keys{k.data(), 70000, d};
  for (int64_t c : {1, 2, 4}) {
    std::vector<float> q(static_cast<size_t>(d));
    for (int64_t j = 0; j < d; ++j) q[j] = std::cos(0.3f * static_cast<float>(j + c));
    CandidateReceipt x = a.query(0, 1, q.data(), 69999, *a.params({{"min_collisions", std::to_string(c)}}), &keys);
    CandidateReceipt y = b.query(0, 1, q.data(), 69999, *b.params({{"min_collisions", std::to_string(c)}}), &keys);
    INFO("c=" << c);
    CHECK(x.candidates.size() > 0);
    if (c == 1) CHECK(x.candidates.back() >= 65536);  // the second segment answers too
    CHECK(x.candidates == y.candidates);
    CHECK(x.scores == y.scores);
    CHECK(x.inclusion == y.inclusion);
  }
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
        volatile float s = 0;  // one rounding per product and per sum, as the builder and query do
        for (int64_t j = 0; j < 16; ++j) {
          volatile float xc = x[j] - (center ? mu[j] : 0.f);
          volatile float p = xc * w[j * 80 + t * 4 + b];
          s = s + p;
        }
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
