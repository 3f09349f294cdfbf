#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "kvtool/artifact.h"
#include "clusterkv/clusterkv_builder.h"
#include "common/stored_floats.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "reference_scorer.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

void ckv_dump(const std::string& path, int64_t tokens = 700) { kind_dump(path, tokens, 12, 20); }

// The reference's 16 sink rows (the row counts below assume them; the default is 1).
BuildOptions opts(const std::string& out, int threads = 1) {
  BuildOptions o = quiet_build(out, threads);
  o.sink = 16;
  return o;
}

// Rows [0, 300) of d.h5 at 8 tokens per cluster: f32.kvi with f32 centroids (the checks read them
// as f32) and DTYPE.kvi with `dtype`, built again at 3 threads to the same bytes. Returns the
// params of the `dtype` build.
ClusterKvParams build_f32_and(const TempDir& tmp, const std::string& dtype) {
  ClusterKvParams p;
  p.centroid_dtype = "f32";
  p.tokens_per_cluster = 8;
  const std::string art = tmp.file(dtype + ".kvi"), again = tmp.file(dtype + "c.kvi");
  BuildOptions a = opts(tmp.file("f32.kvi")), b = opts(art), c = opts(again, 3);
  a.prefix = b.prefix = c.prefix = 300;
  build_artifact(tmp.file("d.h5"), a, ClusterKvBuilder(p));
  p.centroid_dtype = dtype;
  build_artifact(tmp.file("d.h5"), b, ClusterKvBuilder(p));
  build_artifact(tmp.file("d.h5"), c, ClusterKvBuilder(p));
  CHECK(read_bytes(art) == read_bytes(again));  // any thread count
  return p;
}

// Queries rank the stored centroids: one query of layer 1, query head 2 agrees with the independent
// reference scorer; and the artifact verifies against d.h5.
void check_query_and_verify(const TempDir& tmp, const std::string& name) {
  ArtifactReader r(tmp.file(name));
  std::vector<float> q(16);
  for (size_t t = 0; t < q.size(); ++t) q[t] = 0.3f - 0.05f * static_cast<float>(t);
  SelectorSet sel(r);
  RefQuery rq;
  rq.budget_fraction = 0.2;
  CandidateReceipt rc = sel.query(1, 2, q.data(), 299, *sel.params({{"budget", "0.2"}}));
  CHECK(compare_with_reference(rc, reference_query(r, 1, 2, q.data(), 299, rq)) == "");
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file(name), vo));
}

}  // namespace

TEST_CASE(
    "clusterkv: members partition the indexed rows, sorted by (cluster, position), deterministic across threads") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p;
  p.centroid_dtype = "f32";  // the checks read the centroids as f32
  p.tokens_per_cluster = 8;
  BuildOptions a = opts(tmp.file("a.kvi"), 1), b = opts(tmp.file("b.kvi"), 3);
  a.prefix = b.prefix = 600;
  build_artifact(tmp.file("d.h5"), a, ClusterKvBuilder(p));
  build_artifact(tmp.file("d.h5"), b, ClusterKvBuilder(p));
  CHECK(read_bytes(tmp.file("a.kvi")) == read_bytes(tmp.file("b.kvi")));
  ArtifactReader r(tmp.file("a.kvi"));
  auto sizes = section_as<uint32_t>(r, "ckv_sizes", 1, 0);
  auto prefix = section_as<uint32_t>(r, "ckv_prefix_sums", 1, 0);
  auto members = section_as<uint32_t>(r, "ckv_members", 1, 0);
  CHECK(sizes.size() == 73);  // round((600 - 16) / 8)
  std::set<uint32_t> all(members.begin(), members.end());
  CHECK(all.size() == 584);
  CHECK(*all.begin() == 16);
  CHECK(*all.rbegin() == 599);
  uint32_t run = 0;
  for (size_t c = 0; c < sizes.size(); ++c) {
    run += sizes[c];
    CHECK(prefix[c] == run);
    for (uint32_t i = prefix[c] - sizes[c] + 1; i < prefix[c]; ++i) CHECK(members[i] > members[i - 1]);
  }
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("a.kvi"), vo));
}

TEST_CASE("clusterkv: more than 256 clusters rank correctly and queries cut the last cluster") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p;
  p.centroid_dtype = "f32";  // the checks read the centroids as f32
  p.clusters = 300;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), ClusterKvBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  auto cen = section_as<float>(r, "ckv_centroids", 0, 1);
  auto sizes = section_as<uint32_t>(r, "ckv_sizes", 0, 1);
  auto prefix = section_as<uint32_t>(r, "ckv_prefix_sums", 0, 1);
  auto members = section_as<uint32_t>(r, "ckv_members", 0, 1);
  REQUIRE(sizes.size() == 300);
  std::vector<float> q(16);
  for (int i = 0; i < 16; ++i) q[i] = std::cos(0.3f * static_cast<float>(i));
  // Brute force: the best cluster by raw q·centroid (ties by lower index) must come first.
  int64_t best = -1;
  float bs = -1e30f;
  for (int64_t c = 0; c < 300; ++c) {
    float s = 0;
    for (int t = 0; t < 16; ++t) s += q[t] * cen[c * 16 + t];
    if (sizes[c] > 0 && s > bs) bs = s, best = c;
  }
  SelectorSet sel(r);
  CandidateReceipt rc = sel.query(0, 2, q.data(), 699, *sel.params({{"budget", "7"}}));
  REQUIRE(rc.candidates.size() == 7);
  CHECK(rc.candidates[0] == members[prefix[best] - sizes[best]]);
  for (size_t i = 1; i < rc.scores.size(); ++i) CHECK(rc.scores[i - 1] >= rc.scores[i]);
  std::set<int64_t> uniq(rc.candidates.begin(), rc.candidates.end());
  CHECK(uniq.size() == rc.candidates.size());
  CHECK(rc.always_included.size() == 16);  // sink rows; coverage is the whole dump
  RefQuery rq;  // every row, score and the cut of the last cluster, from the independent scorer
  rq.budget_rows = 7;
  CHECK(compare_with_reference(rc, reference_query(r, 0, 2, q.data(), 699, rq)) == "");
}

TEST_CASE("clusterkv: dense layers, raw-mean vs spherical centroids, bad parameters") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p;
  p.centroid_dtype = "f32";  // the checks read the centroids as f32
  p.dense_layers = {0};
  p.centroid = CentroidRule::spherical;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("s.kvi")), ClusterKvBuilder(p));
  ArtifactReader r(tmp.file("s.kvi"));
  CHECK_FALSE(r.find("ckv_centroids", 0, 0));
  auto cen = section_as<float>(r, "ckv_centroids", 1, 0);
  for (size_t c = 0; c < cen.size() / 16; ++c) {
    double n = 0;
    for (int t = 0; t < 16; ++t) n += cen[c * 16 + t] * cen[c * 16 + t];
    CHECK(n == Approx(1.0).epsilon(1e-4));
  }
  CHECK_NOTHROW(verify_artifact(tmp.file("s.kvi"), {}));
  SelectorSet sel(r);
  std::vector<float> q(16, 1.f);
  CHECK(sel.query(0, 0, q.data(), 699, *sel.params({{"budget", "5"}})).candidates.size() ==
        684);  // dense layer: every row
  CHECK(reason_of([] { parse_centroid_rule("median"); }) == "USAGE");
  CHECK(parse_layer_list("0-1,3") == std::vector<int64_t>({0, 1, 3}));
  ClusterKvParams bad;
  bad.tokens_per_cluster = -1;
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), ClusterKvBuilder(bad)); }) ==
        "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
}

TEST_CASE("clusterkv append: sealed windows become a new generation, a partial window stays uncovered") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p;
  p.centroid_dtype = "f32";  // the checks read the centroids as f32
  p.tokens_per_cluster = 8;
  BuildOptions o = opts(tmp.file("g1.kvi"));
  o.prefix = 300;
  build_artifact(tmp.file("d.h5"), o, ClusterKvBuilder(p));
  ClusterKvAppendSummary j =
      clusterkv_append({tmp.file("g1.kvi"), tmp.file("d.h5"), tmp.file("g2.kvi"), 690, "", true}, 120, 4);
  CHECK(j.windows == 3);
  CHECK(j.to_json()["coverage"] == json({0, 660}));
  CHECK(j.uncovered_rows == 30);
  ArtifactReader a(tmp.file("g1.kvi")), b(tmp.file("g2.kvi"));
  CHECK(b.manifest()["index_generation"] == 2);
  CHECK(b.manifest()["selector_generation"] == 1);
  auto sa = section_as<uint32_t>(a, "ckv_sizes", 1, 1), sb = section_as<uint32_t>(b, "ckv_sizes", 1, 1);
  REQUIRE(sb.size() == sa.size() + 12);
  CHECK(std::equal(sa.begin(), sa.end(), sb.begin()));  // old clusters untouched
  const json& gens = b.manifest()["kind_data"]["generations"];
  CHECK(gens.size() == 2);
  CHECK(gens[1]["windows"].size() == 3);
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  CHECK_NOTHROW(verify_artifact(tmp.file("g2.kvi"), vo));
  SelectorSet sel(b);
  std::vector<float> q(16, 0.2f);
  CandidateReceipt rc = sel.query(1, 2, q.data(), 690, *sel.params({{"budget", "0.1"}}));
  CHECK(rc.always_included.size() == 16 + 31);  // sink + the uncovered partial window up to the position
  CHECK(reason_of([&] {
          clusterkv_append({tmp.file("g1.kvi"), tmp.file("d.h5"), tmp.file("g3.kvi"), 400, "", true}, 120, 4);
        }) == "USAGE");
  copy_dump(tmp.file("d.h5"), tmp.file("changed.h5"), {}, [](int64_t l, int64_t h, auto& k, auto&) {
    if (l == 1 && h == 1) k[200 * 16] += 1.f;
  });
  CHECK(reason_of([&] {
          clusterkv_append({tmp.file("g1.kvi"), tmp.file("changed.h5"), tmp.file("g3.kvi"), 690, "", true}, 120, 4);
        }) == "PAYLOAD_MISMATCH");
  CHECK_FALSE(fs::exists(tmp.file("g3.kvi")));
}

TEST_CASE("clusterkv verify: forged partitions, prefix sums and generations are rejected") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"), 300);
  ClusterKvParams p;
  p.centroid_dtype = "f32";  // the checks read the centroids as f32
  p.tokens_per_cluster = 8;
  build_artifact(tmp.file("d.h5"), opts(tmp.file("a.kvi")), ClusterKvBuilder(p));
  ArtifactReader r(tmp.file("a.kvi"));
  forge_artifact(r, tmp.file("dup.kvi"), 0, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "ckv_members") std::memcpy(b.data() + 4, b.data(), 4);  // a row twice, another missing
  });
  forge_artifact(r, tmp.file("pre.kvi"), 0, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "ckv_prefix_sums") b[0] ^= 1;
  });
  forge_artifact(
      r, tmp.file("gen.kvi"), 0, 0, [](const SectionEntry&, auto&) {},
      [](json& kd) { kd["parts"][0]["generations"][0]["rows"][0] = 17; });
  forge_artifact(r, tmp.file("nan.kvi"), 0, 0, [](const SectionEntry& s, auto& b) {
    if (s.name == "ckv_centroids") {
      float x = NAN;
      std::memcpy(b.data(), &x, 4);
    }
  });
  CHECK(reason_of([&] { verify_artifact(tmp.file("dup.kvi"), {}); }) == "MEMBERS_NOT_PARTITION");
  CHECK(reason_of([&] { verify_artifact(tmp.file("pre.kvi"), {}); }) == "PREFIX_SUM_MISMATCH");
  CHECK(reason_of([&] { verify_artifact(tmp.file("gen.kvi"), {}); }) == "GENERATIONS_NOT_CONTIGUOUS");
  CHECK(reason_of([&] { verify_artifact(tmp.file("nan.kvi"), {}); }) == "NON_FINITE");
}

TEST_CASE("clusterkv --centroid-dtype f16: the f32 build's clusters with rounded centroids, append keeps them") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p = build_f32_and(tmp, "f16");
  ArtifactReader r32(tmp.file("f32.kvi")), r16(tmp.file("f16.kvi"));
  CHECK(r16.manifest()["params"]["centroid_dtype"] == "f16");
  CHECK_FALSE(r32.manifest()["params"].contains("centroid_dtype"));
  REQUIRE(r16.find("ckv_centroids", 1, 1)->dtype == "f16");
  auto c32 = section_as<float>(r32, "ckv_centroids", 1, 1);
  auto c16 = section_as<uint16_t>(r16, "ckv_centroids", 1, 1);
  REQUIRE(c32.size() == c16.size());
  for (size_t i = 0; i < c32.size(); ++i) REQUIRE(c16[i] == f32_to_f16(c32[i]));
  CHECK(section_as<uint32_t>(r32, "ckv_members", 1, 1) == section_as<uint32_t>(r16, "ckv_members", 1, 1));
  check_query_and_verify(tmp, "f16.kvi");  // ranked on the f16-rounded centroids
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  clusterkv_append({tmp.file("f16.kvi"), tmp.file("d.h5"), tmp.file("g2.kvi"), 690, "", true}, 120, 4);
  ArtifactReader g2(tmp.file("g2.kvi"));
  auto n16 = section_as<uint16_t>(g2, "ckv_centroids", 1, 1);
  REQUIRE(g2.find("ckv_centroids", 1, 1)->dtype == "f16");
  CHECK(std::equal(c16.begin(), c16.end(), n16.begin()));  // old centroids round-trip exactly
  CHECK_NOTHROW(verify_artifact(tmp.file("g2.kvi"), vo));
  // A manifest whose dtype is not the sections', or no known dtype, is refused.
  repack_artifact(tmp.file("f32.kvi"), tmp.file("says16.kvi"), {{}, {}, {{"/params/centroid_dtype", "f16"}}});
  CHECK(reason_of([&] { verify_artifact(tmp.file("says16.kvi"), {}); }) == "PART_INVALID");  // §4.4 rule 4
  repack_artifact(tmp.file("f16.kvi"), tmp.file("f64.kvi"), {{}, {}, {{"/params/centroid_dtype", "f64"}}});
  CHECK(reason_of([&] { verify_artifact(tmp.file("f64.kvi"), {}); }) == "BAD_MANIFEST");
  p.centroid_dtype = "f64";
  CHECK(reason_of([&] { build_artifact(tmp.file("d.h5"), opts(tmp.file("x.kvi")), ClusterKvBuilder(p)); }) == "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
  // Keys beyond the f16 range cannot have f16 centroids: refused, no output.
  copy_dump(tmp.file("d.h5"), tmp.file("big.h5"), {}, [](int64_t, int64_t, auto& k, auto&) {
    for (auto& x : k) x *= 1e5f;
  });
  p.centroid_dtype = "f16";
  CHECK(reason_of([&] { build_artifact(tmp.file("big.h5"), opts(tmp.file("y.kvi")), ClusterKvBuilder(p)); }) ==
        "USAGE");
  CHECK_FALSE(fs::exists(tmp.file("y.kvi")));
}

TEST_CASE("i8 rows: each value within half a step of its f32 value, the largest code 64..127, and stable") {
  // Rows of different magnitudes: ordinary keys, a zero row, tiny (the exponent's floor) and huge.
  const std::vector<float> scales = {1.f, 0.f, 3e-38f, 1e-41f, 2.5e37f, 0.0123f};
  std::vector<float> v;
  for (size_t r = 0; r < scales.size(); ++r)
    for (int t = 0; t < 16; ++t) v.push_back(scales[r] * std::sin(1.7f * static_cast<float>(t + 16 * r) + 0.3f));
  const I8Rows q = i8_rows_of(v, 16, "a test value");
  REQUIRE(q.codes.size() == v.size());
  REQUIRE(q.exponents.size() == scales.size());
  const std::vector<float> w = widen_i8_rows(q.codes.data(), q.exponents.data(), scales.size(), 16);
  for (size_t r = 0; r < scales.size(); ++r) {
    const int e = static_cast<int8_t>(q.exponents[r]);
    int largest = 0;
    for (size_t t = 0; t < 16; ++t) {
      const size_t i = r * 16 + t;
      largest = std::max(largest, std::abs(static_cast<int>(static_cast<int8_t>(q.codes[i]))));
      REQUIRE(std::fabs(static_cast<double>(w[i]) - v[i]) <= std::ldexp(0.5, e));  // half a step
      REQUIRE(std::isfinite(w[i]));
    }
    INFO("row " << r << " exponent " << e);
    if (largest == 0)
      CHECK(e == 0);  // the zero row, and a row below the floor's smallest step
    else if (e > -128)
      CHECK((largest >= 64 && largest <= 127));
    else
      CHECK(largest <= 127);  // the floor: rows too small for 64 codes
  }
  // Quantizing the widened rows again gives the same bytes (append rewrites old centroids this way).
  const I8Rows again = i8_rows_of(w, 16, "a test value");
  CHECK(again.codes == q.codes);
  CHECK(again.exponents == q.exponents);
  std::vector<float> bad = v;
  bad[5] = NAN;
  CHECK(reason_of([&] { i8_rows_of(bad, 16, "a test value"); }) == "USAGE");
  // The largest row that widens finite, and the first beyond it (e 122 would round it to 2^128).
  std::vector<float> top(16, 1.f);
  top[3] = -kI8RowsMax;
  const I8Rows t = i8_rows_of(top, 16, "a test value");
  CHECK(std::isfinite(widen_i8_rows(t.codes.data(), t.exponents.data(), 1, 16)[3]));
  top[3] = std::nextafter(kI8RowsMax, INFINITY);
  CHECK(reason_of([&] { i8_rows_of(top, 16, "a test value"); }) == "USAGE");
  top[3] = FLT_MAX;
  CHECK(reason_of([&] { i8_rows_of(top, 16, "a test value"); }) == "USAGE");
  CHECK(i8_row_exponent(INFINITY) == 0);
}

TEST_CASE("clusterkv --centroid-dtype i8: the f32 build's clusters, verified, queried like the reference, appended") {
  TempDir tmp;
  ckv_dump(tmp.file("d.h5"));
  ClusterKvParams p = build_f32_and(tmp, "i8");
  ArtifactReader r32(tmp.file("f32.kvi")), r8(tmp.file("i8.kvi"));
  CHECK(r8.manifest()["params"]["centroid_dtype"] == "i8");
  REQUIRE(r8.find("ckv_centroids", 1, 1)->dtype == "i8");
  REQUIRE(r8.find("ckv_centroids_exp", 1, 1)->dtype == "i8");
  auto c32 = section_as<float>(r32, "ckv_centroids", 1, 1);
  auto codes = section_as<int8_t>(r8, "ckv_centroids", 1, 1);
  auto exps = section_as<int8_t>(r8, "ckv_centroids_exp", 1, 1);
  REQUIRE(c32.size() == codes.size());
  REQUIRE(exps.size() * 16 == codes.size());
  for (size_t i = 0; i < c32.size(); ++i)  // each stored value within half a step of the f32 centroid
    REQUIRE(std::fabs(std::ldexp(static_cast<double>(codes[i]), exps[i / 16]) - c32[i]) <=
            std::ldexp(0.5, exps[i / 16]));
  CHECK(section_as<uint32_t>(r32, "ckv_members", 1, 1) == section_as<uint32_t>(r8, "ckv_members", 1, 1));
  check_query_and_verify(tmp, "i8.kvi");  // ranked on the stored i8 centroids
  VerifyOptions vo;
  vo.source = tmp.file("d.h5");
  // Append keeps the old codes and exponents byte for byte.
  clusterkv_append({tmp.file("i8.kvi"), tmp.file("d.h5"), tmp.file("g2.kvi"), 690, "", true}, 120, 4);
  ArtifactReader g2(tmp.file("g2.kvi"));
  auto n8 = section_as<int8_t>(g2, "ckv_centroids", 1, 1);
  auto nx = section_as<int8_t>(g2, "ckv_centroids_exp", 1, 1);
  REQUIRE(nx.size() > exps.size());
  CHECK(std::equal(codes.begin(), codes.end(), n8.begin()));
  CHECK(std::equal(exps.begin(), exps.end(), nx.begin()));
  CHECK_NOTHROW(verify_artifact(tmp.file("g2.kvi"), vo));
  // A valid row the builder would not write (code -128) is kept as it is, not re-quantized.
  forge_artifact(r8, tmp.file("m128.kvi"), 1, 1, [](const SectionEntry& s, auto& bytes) {
    if (s.name == "ckv_centroids") bytes[0] = 0x80;
  });
  CHECK_NOTHROW(verify_artifact(tmp.file("m128.kvi"), vo));
  clusterkv_append({tmp.file("m128.kvi"), tmp.file("d.h5"), tmp.file("g3.kvi"), 690, "", true}, 120, 4);
  ArtifactReader m128(tmp.file("m128.kvi")), g3(tmp.file("g3.kvi"));
  const auto before = section_as<int8_t>(m128, "ckv_centroids", 1, 1),
             after = section_as<int8_t>(g3, "ckv_centroids", 1, 1);
  REQUIRE(before[0] == -128);
  CHECK(std::equal(before.begin(), before.end(), after.begin()));
  CHECK(std::equal(exps.begin(), exps.end(), section_as<int8_t>(g3, "ckv_centroids_exp", 1, 1).begin()));
  // Keys whose centroid is beyond the i8 rows' range: refused, no output.
  copy_dump(tmp.file("d.h5"), tmp.file("huge.h5"), {}, [](int64_t l, int64_t h, auto& k, auto&) {
    if (l == 0 && h == 0)
      for (auto& x : k) x = std::copysign(3.39e38f, x);
  });
  try {
    build_artifact(tmp.file("huge.h5"), opts(tmp.file("h.kvi")), ClusterKvBuilder(p));
    FAIL("built centroids beyond the i8 rows' range");
  } catch (const Error& e) {
    CHECK(std::string(e.reason_name()) == "USAGE");
    CHECK_THAT(e.what(), Catch::Contains("beyond the i8 rows' range"));
  }
  CHECK_FALSE(fs::exists(tmp.file("h.kvi")));
  // Forged: no exponents, an exponent that overflows f32, f16 claimed.
  repack_artifact(tmp.file("i8.kvi"), tmp.file("noexp.kvi"), {{"ckv_centroids_exp@1,1"}, {}, {}});
  CHECK(reason_of([&] { verify_artifact(tmp.file("noexp.kvi"), {}); }) == "PART_INVALID");
  forge_artifact(r8, tmp.file("big.kvi"), 0, 0, [](const SectionEntry& s, auto& bytes) {
    if (s.name == "ckv_centroids_exp") bytes[0] = 127;  // 64..127 x 2^127: beyond f32
  });
  CHECK(reason_of([&] { verify_artifact(tmp.file("big.kvi"), {}); }) == "NON_FINITE");
  repack_artifact(tmp.file("i8.kvi"), tmp.file("says16.kvi"), {{}, {}, {{"/params/centroid_dtype", "f16"}}});
  CHECK(reason_of([&] { verify_artifact(tmp.file("says16.kvi"), {}); }) == "PART_INVALID");
}

TEST_CASE("clusterkv default count: the f16 count's raw part bytes spent on i8 centroids") {
  // round(410 (n/32768)^(1/3)) f16 clusters cost (2d + 8) bytes each; i8 ones d + 9.
  CHECK(clusterkv_default_clusters(32768, 128, "f16") == 410);
  CHECK(clusterkv_default_clusters(32768, 128, "f32") == 410);
  CHECK(clusterkv_default_clusters(32768, 128, "i8") == std::llround(410.0 * 264 / 137));
  CHECK(clusterkv_default_clusters(383, 64, "i8") == std::llround(410.0 * std::cbrt(383 / 32768.0) * 136 / 73));
  CHECK(clusterkv_default_clusters(3, 8, "i8") == 3);  // at most one cluster per row
  CHECK(clusterkv_default_clusters(0, 8, "i8") == 1);
}
