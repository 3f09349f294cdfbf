// scoring::top_k, top_k_few_into and rank_all against a full sort with the documented order (kvtool/scoring.h):
// score descending, equal scores by lower index; -0 and +0 are equal scores.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "kvtool/scoring.h"
#include "pq/pq_row_groups.h"

namespace {

// Equal bit patterns (memcmp: signed zeros and NaN payloads count); empty vectors are equal.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<int64_t> reference_order(const std::vector<float>& s) {
  std::vector<int64_t> o(s.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  return o;
}

}  // namespace

TEST_CASE("scoring: top_k equals the first k of a full stable sort, ties and signed zeros included") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    std::vector<float> s(static_cast<size_t>(n));
    // Few distinct values, both zeros, negatives, infinities and denormals: every tie rule is hit.
    const float pool[] = {-0.0f, 0.0f, 1.5f, -1.5f, 1e-40f, -1e-40f, 3.0e38f, -INFINITY, INFINITY, 2.25f};
    for (auto& x : s) x = trial % 2 ? pool[rng() % 10] : std::uniform_real_distribution<float>(-4, 4)(rng);
    const auto want = reference_order(s);
    for (int64_t k : {int64_t{0}, int64_t{1}, n / 10, n / 2, n - 1, n, n + 5}) {
      const auto got = kvtool::scoring::top_k(s.data(), n, k);
      const int64_t b = std::clamp<int64_t>(k, 0, n);
      REQUIRE(got.size() == static_cast<size_t>(b));
      REQUIRE(std::equal(got.begin(), got.end(), want.begin()));
      std::vector<int64_t> few(static_cast<size_t>(b) + 1, -7);  // top_k_few_into: the same order
      REQUIRE(kvtool::scoring::top_k_few_into(s.data(), n, k, few.data()) == b);
      REQUIRE(std::equal(got.begin(), got.end(), few.begin()));
      REQUIRE(few[static_cast<size_t>(b)] == -7);
    }
    REQUIRE(kvtool::scoring::rank_all(s.data(), n) == want);
  }
}

TEST_CASE("scoring: top_k_into writes what top_k returns, also into a thread's warm scratch") {
  std::mt19937 rng(11);
  std::vector<float> s(40000);
  for (auto& x : s) x = std::uniform_real_distribution<float>(-2, 2)(rng);
  for (int64_t k : {int64_t{1}, int64_t{2048}, int64_t{4000}, int64_t{39999}}) {
    std::vector<int64_t> out(static_cast<size_t>(k) + 3, -7);
    REQUIRE(kvtool::scoring::top_k_into(s.data(), 40000, k, out.data()) == k);
    const auto want = kvtool::scoring::top_k(s.data(), 40000, k);
    REQUIRE(std::equal(want.begin(), want.end(), out.begin()));
    REQUIRE(out[static_cast<size_t>(k)] == -7);  // nothing written past min(k, n)
  }
}

// Column-major scoring at every SIMD level this CPU runs equals the row-major loop bit for bit
// (memcmp: signed zeros and NaN payloads included), for u8 and u16 codes, table sizes on both sides
// of the AVX-512 register path (64 entries) and row counts around the vector widths.
TEST_CASE("scoring: pq_scores_cm at every SIMD level equals the row-major scores bit for bit") {
  namespace sc = kvtool::scoring;
  std::mt19937 rng(3);
  const sc::Simd best = sc::simd_supported();
  INFO("best level on this CPU: " << sc::simd_name(best));
  for (int64_t k : {2, 16, 33, 64, 65, 256, 1024}) {
    for (int64_t m : {1, 2, 3, 16}) {
      for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 1000}) {
        std::vector<float> lut(static_cast<size_t>(m * k));
        for (size_t e = 0; e < lut.size(); ++e)
          lut[e] = e % 11 == 0 ? -0.0f : std::uniform_real_distribution<float>(-3, 3)(rng);
        std::vector<uint16_t> rm(static_cast<size_t>(n * m)), cm(rm.size());
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) rm[i * m + j] = cm[j * n + i] = static_cast<uint16_t>(rng() % k);
        std::vector<uint8_t> rm8(rm.begin(), rm.end()), cm8(cm.begin(), cm.end());
        std::vector<float> want(static_cast<size_t>(n)), got(want.size());
        if (k <= 256)
          sc::pq_scores_u8(lut.data(), rm8.data(), n, m, k, want.data());
        else
          sc::pq_scores_u16(lut.data(), rm.data(), n, m, k, want.data());
        for (int level = 0; level <= static_cast<int>(best); ++level) {
          REQUIRE(sc::set_simd_level(static_cast<sc::Simd>(level)) == static_cast<sc::Simd>(level));
          std::fill(got.begin(), got.end(), 1234.f);
          if (k <= 256)
            sc::pq_scores_cm_u8(lut.data(), cm8.data(), n, m, k, got.data());
          else
            sc::pq_scores_cm_u16(lut.data(), cm.data(), n, m, k, got.data());
          INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)) << " k " << k << " m " << m << " n " << n);
          REQUIRE(same_bits(got, want));
        }
        if (k <= 256 && k > 1) {  // u16 column-major codes with the same values agree too
          sc::pq_scores_cm_u16(lut.data(), cm.data(), n, m, k, got.data());
          REQUIRE(same_bits(got, want));
        }
      }
    }
  }
  sc::set_simd_level(sc::Simd::avx512);  // back to the best the CPU runs
  CHECK(sc::simd_level() == best);
}

// The SSE2 blocks (m 2, 4, 8 and multiples of 16; 16 and 256 rows at a time) and the rows and
// columns they leave to the byte loop, against the definition; bytes outside the output stay.
TEST_CASE("scoring: codes_to_column_major writes row i, subspace j to out at j * n + i, for any n and m") {
  std::mt19937 rng(11);
  for (int64_t m : {1, 2, 3, 4, 5, 8, 12, 16, 17, 32, 48, 64})
    for (int64_t n : {0, 1, 15, 16, 17, 255, 256, 257, 1000, 4103}) {
      std::vector<uint8_t> codes(static_cast<size_t>(n * m)), want(codes.size() + 1, 0xA5), got(want);
      for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) want[j * n + i] = codes[i * m + j];
      kvtool::scoring::codes_to_column_major(codes.data(), n, m, got.data());
      INFO("m " << m << " n " << n);
      REQUIRE(got == want);
    }
}

// Every level against the definition, one column at a time in the stated order: row and column
// counts that leave partial register tiles, and simhash_codes equal to the signs of those sums.
TEST_CASE("scoring: simhash_products equals the fixed-order sums bit for bit at every SIMD level") {
  namespace sc = kvtool::scoring;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const sc::Simd best = sc::simd_supported();
  struct Restore {
    ~Restore() { kvtool::scoring::set_simd_level(kvtool::scoring::Simd::avx512); }  // the best the CPU runs
  } restore;
  for (int64_t rows : {0, 1, 5, 6, 7, 13, 70})  // 70: past a block of 64 rows (AVX2)
    for (int64_t d : {0, 1, 8, 128})
      for (int64_t cols : {1, 7, 8, 15, 16, 17, 63, 64, 65, 150, 1500}) {
        std::vector<float> x(static_cast<size_t>(rows * d)), w(static_cast<size_t>(d * cols));
        for (float& v : x) v = normal(rng);
        for (float& v : w) v = normal(rng);
        // 16 sentinels past the output: a masked tail store must not reach them.
        std::vector<float> want(static_cast<size_t>(rows * cols + 16), 1234.f), got(want.size());
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = 0; c < cols; ++c) {
            volatile float sum = 0.f;  // one rounding per product and per addition, no FMA
            for (int64_t j = 0; j < d; ++j) {
              volatile float prod = x[i * d + j] * w[j * cols + c];
              sum = sum + prod;
            }
            want[i * cols + c] = sum;
          }
        for (int level = 0; level <= static_cast<int>(best); ++level) {
          sc::set_simd_level(static_cast<sc::Simd>(level));
          std::fill(got.begin(), got.end(), 1234.f);
          sc::simhash_products(x.data(), rows, d, w.data(), cols, got.data());
          INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)) << " rows " << rows << " d " << d << " cols "
                        << cols);
          REQUIRE(same_bits(got, want));
          if (rows == 0 || cols % 5 != 0) continue;  // codes: 5 bits a table
          std::vector<uint32_t> codes(static_cast<size_t>(cols / 5));
          sc::simhash_codes(x.data(), d, w.data(), 5, cols / 5, codes.data());
          for (int64_t t = 0; t < cols / 5; ++t)
            for (int64_t b = 0; b < 5; ++b) REQUIRE(((codes[t] >> b) & 1) == (want[t * 5 + b] > 0.f));
        }
      }
}

// The sampled selection (n >= 8192, k <= n / 4) against the full sort, on inputs that make its
// sample miss (sorted, periodic with the sample's stride, ties everywhere) as well as ordinary ones,
// at every SIMD level: a miss may cost time, never change the answer.
TEST_CASE("scoring: top_k on large inputs equals the full sort whatever its sample sees") {
  namespace sc = kvtool::scoring;
  std::mt19937 rng(21);
  for (int64_t n : {8192, 40003, 65536}) {  // 40003: a tail past the last whole vector
    for (int shape = 0; shape < 6; ++shape) {
      std::vector<float> s(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const float u = std::uniform_real_distribution<float>(-3, 3)(rng);
        switch (shape) {
          case 0:
            s[i] = u;
            break;
          case 1:
            s[i] = static_cast<float>(rng() % 7) - 3.0f;
            break;  // ties everywhere
          case 2:
            s[i] = static_cast<float>(i) * 1e-3f;
            break;  // ascending: the best at the end
          case 3:
            s[i] = i % (n / 2048) == 0 ? -100.0f : u;
            break;  // the sample sees only the worst
          case 4:
            s[i] = i % (n / 2048) == 0 ? 100.0f + u : u;
            break;  // the sample sees only the best
          default:
            s[i] = i % 3 == 0 ? -0.0f : (i % 3 == 1 ? 0.0f : u);
            break;  // signed zeros tie
        }
      }
      const auto want = reference_order(s);
      for (int level = 0; level <= static_cast<int>(sc::simd_supported()); ++level) {
        sc::set_simd_level(static_cast<sc::Simd>(level));
        for (int64_t k : {int64_t{1}, int64_t{100}, n / 10, n / 4}) {
          const auto got = sc::top_k(s.data(), n, k);
          INFO("n " << n << " shape " << shape << " k " << k << " level " << level);
          REQUIRE(got.size() == static_cast<size_t>(k));
          REQUIRE(std::equal(got.begin(), got.end(), want.begin()));
          // Row order: the same indices, increasing.
          std::vector<int64_t> rows(static_cast<size_t>(k) + 1, -7), sorted = got;
          std::sort(sorted.begin(), sorted.end());
          REQUIRE(sc::top_k_rows_into(s.data(), n, k, rows.data()) == k);
          REQUIRE(std::equal(sorted.begin(), sorted.end(), rows.begin()));
          REQUIRE(rows[static_cast<size_t>(k)] == -7);
        }
      }
    }
  }
  sc::set_simd_level(sc::Simd::avx512);
}

// The transposed-codebook tables and the group scorer (the query heads of one kv head in one pass
// over its codes) equal pq_lut and pq_scores_cm query by query, bit for bit, at every SIMD level:
// table sizes around the register paths (64, 128 entries) and the gathers, group sizes around
// the four scored together, row counts around the vector widths and the row blocks.
TEST_CASE("scoring: pq_lut_t and pq_scores_cm_group equal the one-query functions at every SIMD level") {
  namespace sc = kvtool::scoring;
  std::mt19937 rng(5);
  const sc::Simd best = sc::simd_supported();
  for (int64_t k : {2, 33, 64, 65, 128, 129, 256, 1024}) {
    for (int64_t m : {1, 2, 3, 16}) {
      const int64_t dsub = m == 16 ? 2 : 5;
      std::vector<float> cen(static_cast<size_t>(m * k * dsub)), ct(cen.size());
      for (auto& x : cen) x = std::uniform_real_distribution<float>(-2, 2)(rng);
      for (int64_t j = 0; j < m; ++j)
        for (int64_t c = 0; c < k; ++c)
          for (int64_t t = 0; t < dsub; ++t) ct[(j * dsub + t) * k + c] = cen[(j * k + c) * dsub + t];
      for (int64_t g : {1, 3, 4, 6}) {
        std::vector<float> q(static_cast<size_t>(g * m * dsub));
        for (size_t e = 0; e < q.size(); ++e)
          q[e] = e % 7 == 0 ? -0.0f : std::uniform_real_distribution<float>(-3, 3)(rng);
        std::vector<float> lut(static_cast<size_t>(g * m * k)), lut_t(lut.size());
        for (int64_t j = 0; j < g; ++j) sc::pq_lut(&q[j * m * dsub], cen.data(), m, k, dsub, &lut[j * m * k]);
        for (int64_t n : {0, 1, 17, 1000, 2100}) {
          std::vector<uint16_t> cm(static_cast<size_t>(n * m));
          for (auto& c : cm) c = static_cast<uint16_t>(rng() % k);
          std::vector<uint8_t> cm8(cm.begin(), cm.end());
          std::vector<float> want(static_cast<size_t>(g * n)), got(want.size());
          sc::set_simd_level(sc::Simd::portable);
          for (int64_t j = 0; j < g; ++j)
            if (k <= 256)
              sc::pq_scores_cm_u8(&lut[j * m * k], cm8.data(), n, m, k, want.data() + j * n);
            else
              sc::pq_scores_cm_u16(&lut[j * m * k], cm.data(), n, m, k, want.data() + j * n);
          for (int level = 0; level <= static_cast<int>(best); ++level) {
            sc::set_simd_level(static_cast<sc::Simd>(level));
            INFO("level " << sc::simd_name(static_cast<sc::Simd>(level)) << " k " << k << " m " << m << " g " << g
                          << " n " << n);
            std::fill(lut_t.begin(), lut_t.end(), 1234.f);
            for (int64_t j = 0; j < g; ++j) sc::pq_lut_t(&q[j * m * dsub], ct.data(), m, k, dsub, &lut_t[j * m * k]);
            REQUIRE(same_bits(lut_t, lut));
            std::fill(got.begin(), got.end(), 1234.f);
            if (k <= 256)
              sc::pq_scores_cm_group_u8(lut.data(), g, cm8.data(), n, m, k, got.data());
            else
              sc::pq_scores_cm_group_u16(lut.data(), g, cm.data(), n, m, k, got.data());
            REQUIRE(same_bits(got, want));
          }
        }
      }
    }
  }
  sc::set_simd_level(sc::Simd::avx512);
  CHECK(sc::simd_level() == best);
}

TEST_CASE("scoring: top_k_groups_into equals top_k_into over the rows' scores, ties across groups included") {
  using kvtool::scoring::Simd;
  std::mt19937 rng(11);
  // 16-bit row ids up to 65,536 rows, 32-bit above (RowGroups::kRows16).
  for (const int64_t n :
       {int64_t{1}, int64_t{100}, int64_t{2047}, int64_t{9000}, int64_t{32768}, int64_t{65536}, int64_t{70000}}) {
    for (const int64_t key_count : {int64_t{4}, int64_t{64}, int64_t{4096}}) {
      for (const int distinct_scores : {3, 50, 100000})  // few distinct scores: many groups tie
        for (const bool every_key : {false, true}) {     // with every key a group, empty ones among them
          std::vector<uint32_t> key(static_cast<size_t>(n));
          for (auto& x : key) x = static_cast<uint32_t>(rng() % key_count);
          kvtool::scoring::RowGroups g;
          std::vector<uint32_t> keys;
          kvtool::scoring::group_rows(key.data(), n, key_count, g, keys, every_key);
          if (every_key) REQUIRE(g.groups() == key_count);
          REQUIRE(g.n == n);
          REQUIRE((n <= kvtool::scoring::RowGroups::kRows16 ? g.rows16.size() : g.rows32.size()) ==
                  static_cast<size_t>(n));
          std::vector<float> gscore(static_cast<size_t>(g.groups()));
          for (auto& s : gscore)
            s = static_cast<float>(static_cast<int>(rng() % distinct_scores) - distinct_scores / 2);
          std::vector<int64_t> group_of(static_cast<size_t>(key_count), -1);
          for (size_t p = 0; p < keys.size(); ++p) group_of[keys[p]] = static_cast<int64_t>(p);
          std::vector<float> row_score(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) row_score[i] = gscore[group_of[key[i]]];
          for (const Simd level : {Simd::portable, Simd::avx2, Simd::avx512}) {
            const Simd was = kvtool::scoring::set_simd_level(level);
            for (const int64_t k : {int64_t{0}, int64_t{1}, n / 100, n / 10, n / 4, n / 2, n, n + 5}) {
              const int64_t b = std::max<int64_t>(0, std::min(k, n));
              std::vector<int64_t> want(static_cast<size_t>(b) + 1, -7), got(static_cast<size_t>(b) + 1, -7);
              std::vector<float> got_s(static_cast<size_t>(b) + 1, -7.f);
              REQUIRE(kvtool::scoring::top_k_into(row_score.data(), n, k, want.data()) == b);
              REQUIRE(kvtool::scoring::top_k_groups_into(gscore.data(), g, k, 1000, got.data(), got_s.data()) == b);
              for (int64_t r = 0; r < b; ++r) {
                REQUIRE(got[r] == want[r] + 1000);
                REQUIRE(got_s[r] == row_score[want[r]]);
              }
              REQUIRE(got[b] == -7);  // nothing past the answer
              // Row order: the same rows and scores, by increasing row.
              std::vector<std::pair<int64_t, float>> by_row;
              for (int64_t r = 0; r < b; ++r) by_row.emplace_back(got[r], got_s[r]);
              std::sort(by_row.begin(), by_row.end());
              std::vector<int64_t> rows(static_cast<size_t>(b) + 1, -7);
              std::vector<float> rows_s(static_cast<size_t>(b) + 1, -7.f);
              REQUIRE(kvtool::scoring::top_k_groups_rows_into(gscore.data(), g, k, 1000, rows.data(), rows_s.data()) ==
                      b);
              for (int64_t r = 0; r < b; ++r) {
                REQUIRE(rows[r] == by_row[r].first);
                REQUIRE(rows_s[r] == by_row[r].second);
              }
              REQUIRE(rows[b] == -7);
            }
            kvtool::scoring::set_simd_level(was);
          }
        }
    }
  }
}

// pq's pair table (m = 2) against the row scorer over rows holding every code pair: the same bits
// at every SIMD level, -0 entries, infinities and NaNs in the tables included.
TEST_CASE("scoring: pair_scores equals the row scores of every code pair, bit for bit") {
  namespace sc = kvtool::scoring;
  std::mt19937 rng(17);
  const sc::Simd best = sc::simd_supported();
  for (const int64_t k : {int64_t{2}, int64_t{16}, int64_t{128}, int64_t{256}}) {
    std::vector<float> lut(static_cast<size_t>(2 * k));
    for (size_t e = 0; e < lut.size(); ++e)
      lut[e] = e % 5 == 0 ? -0.0f : std::uniform_real_distribution<float>(-4, 4)(rng);
    lut[1] = std::numeric_limits<float>::infinity();
    lut[static_cast<size_t>(k)] = -std::numeric_limits<float>::infinity();
    lut[static_cast<size_t>(k + 1)] = std::numeric_limits<float>::quiet_NaN();
    const int64_t n = k * k;
    std::vector<uint8_t> cm(static_cast<size_t>(2 * n));  // column-major [2, n]: row c0 k + c1
    for (int64_t c0 = 0; c0 < k; ++c0)
      for (int64_t c1 = 0; c1 < k; ++c1) {
        cm[static_cast<size_t>(c0 * k + c1)] = static_cast<uint8_t>(c0);
        cm[static_cast<size_t>(n + c0 * k + c1)] = static_cast<uint8_t>(c1);
      }
    std::vector<float> got(static_cast<size_t>(n));
    sc::pair_scores(lut.data(), k, got.data());
    for (int level = 0; level <= static_cast<int>(best); ++level) {
      sc::set_simd_level(static_cast<sc::Simd>(level));
      std::vector<float> want(static_cast<size_t>(n));
      sc::pq_scores_cm_u8(lut.data(), cm.data(), n, 2, k, want.data());
      INFO("k " << k << " level " << level);
      REQUIRE(same_bits(got, want));
    }
  }
  sc::set_simd_level(sc::Simd::avx512);
}
