// The 4-bit PQ fast scan (kvtool/fastscan.h): every Simd level computes the portable loops' bits,
// and its selection equals the float path's (pq_lut + pq_scores_u8 + top_k) ids and scores bit for
// bit, on random tables and codes and through the pool on synthetic and real (shared model) K/V.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "kvtool/fastscan.h"
#include "kvtool/pool.h"
#include "kvtool/scoring.h"
#include "pq/pq_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace sc = kvtool::scoring;

namespace {

bool same_bits(const float* a, const float* b, size_t n) { return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0; }

// Restores the best level whatever a test leaves.
struct LevelGuard {
  ~LevelGuard() { sc::set_simd_level(sc::Simd::avx512); }
};

std::vector<uint8_t> random_codes(int64_t n, int64_t m, std::mt19937& rng) {
  std::vector<uint8_t> c(static_cast<size_t>(n * m));
  for (auto& x : c) x = static_cast<uint8_t>(rng() % 16);
  return c;
}

// The float path the pool took before the fast scan: ids and scores of the min(k, n) best.
void float_path(const float* lut, const uint8_t* codes, int64_t n, int64_t m, int64_t k, std::vector<int64_t>& ids,
                std::vector<float>& scores) {
  std::vector<float> s(static_cast<size_t>(n));
  sc::pq_scores_u8(lut, codes, n, m, 16, s.data());
  ids = sc::top_k(s.data(), n, k);
  scores.clear();
  for (int64_t i : ids) scores.push_back(s[static_cast<size_t>(i)]);
}

// Tables of several shapes: uniform, few distinct values with signed zeros (ties everywhere), a
// large common offset (float rounding of the sums dominates the quantization step), a constant
// table, and non-finite entries (every row a candidate).
std::vector<float> random_lut(int64_t m, int kind, std::mt19937& rng) {
  std::vector<float> lut(static_cast<size_t>(m * 16));
  std::uniform_real_distribution<float> u(-3, 3);
  const float few[] = {-0.0f, 0.0f, 1.0f, -1.0f, 0.5f};
  for (size_t e = 0; e < lut.size(); ++e) {
    switch (kind) {
      case 0:
        lut[e] = u(rng);
        break;
      case 1:
        lut[e] = few[rng() % 5];
        break;
      case 2:
        lut[e] = 1000.f + u(rng) * 1e-3f;
        break;
      case 3:
        lut[e] = 0.25f;
        break;
      default:
        lut[e] = e == 5 ? INFINITY : u(rng);
        break;
    }
  }
  return lut;
}

}  // namespace

TEST_CASE("fastscan: 16-bit scores and rescoring at every SIMD level equal the portable loops bit for bit") {
  LevelGuard guard;
  std::mt19937 rng(17);
  const sc::Simd best = sc::simd_supported();
  INFO("best level on this CPU: " << sc::simd_name(best));
  for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33}) {
    for (int64_t n : {0, 1, 15, 16, 31, 32, 33, 100, 1000}) {
      const auto codes = random_codes(n, m, rng);
      sc::FastScanCodes fc;
      sc::fastscan_pack(codes.data(), n, m, fc);
      REQUIRE(fc.blocks * 32 >= n);
      std::vector<uint8_t> qlut(static_cast<size_t>(fc.quads * 64));
      for (auto& x : qlut) x = static_cast<uint8_t>(rng());
      // Reference: the sum over all 4 * quads subspaces, padding rows and subspaces with code 0.
      std::vector<uint16_t> want(static_cast<size_t>(fc.blocks * 32));
      for (int64_t i = 0; i < fc.blocks * 32; ++i) {
        uint32_t s = 0;
        for (int64_t j = 0; j < 4 * fc.quads; ++j) s += qlut[j * 16 + (i < n && j < m ? codes[i * m + j] : 0)];
        want[i] = static_cast<uint16_t>(s);
      }
      const auto lut = random_lut(m, 0, rng);
      std::vector<float> exact(static_cast<size_t>(n));
      sc::pq_scores_u8(lut.data(), codes.data(), n, m, 16, exact.data());
      std::vector<uint32_t> rows;
      for (int64_t i = 0; i < n; ++i)
        if (rng() % 3 == 0) rows.push_back(static_cast<uint32_t>(i));
      for (int level = 0; level <= static_cast<int>(best); ++level) {
        sc::set_simd_level(static_cast<sc::Simd>(level));
        INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)) << " m " << m << " n " << n);
        std::vector<uint16_t> got(want.size(), 7);
        sc::fastscan_scores_u16(qlut.data(), fc, got.data());
        REQUIRE(got == want);
        std::vector<float> rs(rows.size(), 1234.f), ws;
        sc::fastscan_rescore(lut.data(), fc, rows.data(), static_cast<int64_t>(rows.size()), rs.data());
        for (uint32_t i : rows) ws.push_back(exact[i]);
        REQUIRE(same_bits(rs.data(), ws.data(), rs.size()));
      }
    }
  }
}

TEST_CASE("fastscan: fastscan_top_k equals the float path's ids and scores bit for bit at every level") {
  LevelGuard guard;
  std::mt19937 rng(29);
  const sc::Simd best = sc::simd_supported();
  for (int64_t n : {1, 31, 100, 5000, 40000}) {
    for (int64_t m : {1, 3, 8, 16, 32}) {
      for (int kind = 0; kind < 5; ++kind) {
        const auto codes = random_codes(n, m, rng);
        sc::FastScanCodes fc;
        sc::fastscan_pack(codes.data(), n, m, fc);
        const auto lut = random_lut(m, kind, rng);
        for (int64_t k : {int64_t{0}, int64_t{1}, n / 10, int64_t{2048}, n / 4, n - 1, n, n + 3}) {
          std::vector<int64_t> want_ids;
          std::vector<float> want_scores;
          float_path(lut.data(), codes.data(), n, m, k, want_ids, want_scores);
          for (int level = 0; level <= static_cast<int>(best); ++level) {
            sc::set_simd_level(static_cast<sc::Simd>(level));
            INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)) << " n " << n << " m " << m << " table "
                          << kind << " k " << k);
            std::vector<int64_t> ids(want_ids.size() + 2, -7);
            std::vector<float> scores(ids.size(), 1234.f);
            const int64_t got = sc::fastscan_top_k(lut.data(), fc, k, ids.data(), scores.data());
            REQUIRE(got == static_cast<int64_t>(want_ids.size()));
            REQUIRE(std::equal(want_ids.begin(), want_ids.end(), ids.begin()));
            REQUIRE(same_bits(scores.data(), want_scores.data(), want_scores.size()));
            REQUIRE(ids[want_ids.size()] == -7);  // nothing past the answer
          }
        }
      }
    }
  }
}

TEST_CASE("fastscan: applies to 4-bit codes and m <= 256 only") {
  CHECK(sc::fastscan_applies(4, 16, 32768));
  CHECK(sc::fastscan_applies(4, 256, 1000));
  CHECK_FALSE(sc::fastscan_applies(4, 257, 1000));
  CHECK_FALSE(sc::fastscan_applies(5, 16, 1000));
  CHECK_FALSE(sc::fastscan_applies(4, 0, 1000));
}

namespace {

// Every dumped query of every (layer, q head) through a pool lease (host tier), at several
// budgets, against the float path over the artifact's own codebooks and codes.
void check_pool_against_float_path(const std::string& dump, const std::string& art, int64_t m) {
  PqParams p;
  p.subspaces = m;
  p.bits = 4;
  p.iters = 6;
  p.codebook_dtype = "f32";
  BuildOptions o = quiet_build(art, 1, 3);
  o.sink = 0;
  o.local = 0;
  build_artifact(dump, o, PqBuilder(p));
  ArtifactReader r(art);
  DumpReader d(dump);
  const auto& g = d.info().geo;
  Pool pool(PoolOptions{});
  pool.publish(publish_request("a", art));
  const Lease lease = pool.acquire("a");
  std::vector<float> qs(static_cast<size_t>(g.q_tokens * g.head_dim)), lut(static_cast<size_t>(m * 16));
  for (const char* budget : {"0.05", "0.1", "0.2", "64"}) {
    const auto params = lease.params({{"budget", budget}});
    for (int64_t layer = 0; layer < g.layers; ++layer)
      for (int64_t qh = 0; qh < g.q_heads; ++qh) {
        const int64_t kvh = qh / (g.q_heads / g.kv_heads);
        const auto cen = section_as<float>(r, "pq_centroids", layer, kvh);
        const auto codes = section_as<uint8_t>(r, "pq_codes", layer, kvh);
        const int64_t n = static_cast<int64_t>(codes.size()) / m;
        d.read_q(layer, qh, qs.data());
        for (int64_t t = 0; t < g.q_tokens; t += 5) {
          const float* q = qs.data() + t * g.head_dim;
          const CandidateReceipt rc = lease.query(layer, qh, q, g.tokens, *params);
          sc::pq_lut(q, cen.data(), m, 16, g.head_dim / m, lut.data());
          std::vector<int64_t> ids;
          std::vector<float> scores;
          float_path(lut.data(), codes.data(), n, m, Budget::parse(budget).rows(n), ids, scores);
          INFO("budget " << budget << " layer " << layer << " q head " << qh << " query " << t);
          REQUIRE(rc.candidates == ids);
          REQUIRE(rc.scores.size() == scores.size());
          REQUIRE(same_bits(rc.scores.data(), scores.data(), scores.size()));
        }
      }
  }
}

}  // namespace

TEST_CASE("fastscan: the pool's b = 4 answers equal the float path on synthetic K/V (n not a multiple of 32)") {
  TempDir tmp;
  kind_dump(tmp.file("d.h5"), 9001, 4, 6, 16, 1);  // 9001 rows: the sampled threshold and a partial block
  for (int64_t m : {4, 8, 16}) check_pool_against_float_path(tmp.file("d.h5"), tmp.file("m.kvi"), m);
}

TEST_CASE("fastscan: the pool's b = 4 answers equal the float path on real K/V (stories260K, cheaders)") {
  TempDir tmp;
  ModelDumpOptions o;
  const std::string models = shared_dir() + "/models/";
  o.model_path = models + "stories260K.bin";
  o.tokenizer_path = models + "tok512.bin";
  o.tokens = 512;
  o.queries = true;
  dump_llama2c(o, DType::f32, {}, tmp.file("st.h5"));
  for (int64_t m : {2, 4, 8}) check_pool_against_float_path(tmp.file("st.h5"), tmp.file("st.kvi"), m);
  o.model_path = models + "cheaders.bin";
  o.tokenizer_path = models + "tok128c.bin";
  o.tokens = 300;
  dump_llama2c(o, DType::f32, {}, tmp.file("ch.h5"));
  for (int64_t m : {16, 32}) check_pool_against_float_path(tmp.file("ch.h5"), tmp.file("ch.kvi"), m);
}
