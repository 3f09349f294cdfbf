// Benchmark (ctest -L bench, or by hand) of pq's two exact selections at m = 2, the basis of
// PqSelector's kRowsPerPair: for 64 parts of 4 queries (a GQA group) each, budget 10 %, one thread,
//  * rows: every row scored (scoring::pq_scores_cm_group_u8) and ranked (scoring::top_k_into);
//  * pairs: every distinct code pair scored once and the rows of the best listed
//    (scoring::group_rows, RowGroups::prefetch, scoring::top_k_groups_into);
// interleaved, best of N (bench_common.h), over codes drawn so that parts average from about 1.3
// to 8 rows a pair. Both give the same ids and scores (checked on every part); which is faster
// decides which one a part uses. Synthetic codes and tables: the cost depends on the counts of rows
// and pairs, not on the values.
//
//   kvtool_bench_pairs [--rounds N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kvtool/scoring.h"
#include "pq/pq_row_groups.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kParts = 64, kQueries = 4;

struct Part {
  std::vector<uint8_t> codes, pair_codes;  // column-major [2, rows], [2, pairs]
  scoring::RowGroups pairs;
  std::vector<float> luts;  // [kQueries, 2, 2^bits]
};

// Codes c = floor(2^bits * u^skew), u uniform: skew 1 spreads rows over every pair, larger skews
// crowd them into fewer.
std::vector<Part> make_parts(int64_t n, int bits, double skew, double& rows_a_pair) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t k = int64_t{1} << bits;
  auto code = [&] { return static_cast<uint8_t>(std::min<int64_t>(k - 1, int64_t(k * std::pow(u(rng), skew)))); };
  std::vector<Part> parts(kParts);
  rows_a_pair = 0;
  for (Part& p : parts) {
    p.codes.resize(static_cast<size_t>(2 * n));
    std::vector<uint32_t> key(static_cast<size_t>(n)), distinct;
    for (int64_t i = 0; i < n; ++i) {
      p.codes[i] = code();
      p.codes[n + i] = code();
      key[i] = static_cast<uint32_t>(p.codes[i]) << bits | p.codes[n + i];
    }
    scoring::group_rows(key.data(), n, k * k, p.pairs, distinct);
    const int64_t count = p.pairs.groups();
    p.pair_codes.resize(static_cast<size_t>(2 * count));
    for (int64_t c = 0; c < count; ++c) {
      p.pair_codes[c] = static_cast<uint8_t>(distinct[c] >> bits);
      p.pair_codes[count + c] = static_cast<uint8_t>(distinct[c] & (k - 1));
    }
    p.luts.resize(static_cast<size_t>(kQueries * 2 * k));
    for (float& x : p.luts) x = g(rng);
    rows_a_pair += static_cast<double>(n) / static_cast<double>(count) / kParts;
  }
  return parts;
}

struct Answers {
  std::vector<float> score;
  std::vector<int64_t> ids;
  std::vector<float> scores;
  Answers(int64_t n, int64_t budget)
      : score(static_cast<size_t>(kQueries * n)),
        ids(static_cast<size_t>(kQueries * budget)),
        scores(static_cast<size_t>(kQueries * budget)) {}
};

void by_rows(const Part& p, int64_t n, int bits, int64_t budget, Answers& a) {
  scoring::pq_scores_cm_group_u8(p.luts.data(), kQueries, p.codes.data(), n, 2, int64_t{1} << bits, a.score.data());
  for (int64_t j = 0; j < kQueries; ++j) {
    int64_t* ids = a.ids.data() + j * budget;
    const float* s = a.score.data() + j * n;
    const int64_t kept = scoring::top_k_into(s, n, budget, ids);
    for (int64_t r = 0; r < kept; ++r) a.scores[static_cast<size_t>(j * budget + r)] = s[ids[r]];
  }
}

void by_pairs(const Part& p, int bits, int64_t budget, Answers& a) {
  const int64_t count = p.pairs.groups();
  scoring::pq_scores_cm_group_u8(p.luts.data(), kQueries, p.pair_codes.data(), count, 2, int64_t{1} << bits,
                                 a.score.data());
  p.pairs.prefetch();
  for (int64_t j = 0; j < kQueries; ++j)
    scoring::top_k_groups_into(a.score.data() + j * count, p.pairs, budget, 0, a.ids.data() + j * budget,
                               a.scores.data() + j * budget);
}

// One setting; returns the pairs path's time over the rows path's (< 1: pairs faster), or -1 when
// the two answers differ.
double compare(int64_t n, int bits, double skew, int rounds) {
  double rows_a_pair = 0;
  const std::vector<Part> parts = make_parts(n, bits, skew, rows_a_pair);
  const int64_t budget = n / 10;
  Answers ra(n, budget), pa(n, budget);
  for (const Part& p : parts) {
    by_rows(p, n, bits, budget, ra);
    by_pairs(p, bits, budget, pa);
    if (ra.ids != pa.ids || ra.scores != pa.scores) return -1;
  }
  bench::Samples rows, pairs;
  auto time = [&](auto&& f) {
    const auto t0 = Clock::now();
    for (const Part& p : parts) f(p);
    return std::chrono::duration<double>(Clock::now() - t0).count() / (kParts * kQueries);
  };
  bench::interleave(
      rounds, [&] { return time([&](const Part& p) { by_pairs(p, bits, budget, pa); }); },
      [&] { return time([&](const Part& p) { by_rows(p, n, bits, budget, ra); }); }, pairs, rows);
  std::printf("%lld rows, b %d, %.2f rows a pair (%lld pairs a part on average), per query:\n", (long long)n, bits,
              rows_a_pair, (long long)(static_cast<double>(n) / rows_a_pair));
  bench::report("pairs (top_k_groups_into)", pairs, "rows (top_k_into)", rows);
  return pairs.min() / rows.min();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = bench::rounds(15);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(3, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: kvtool_bench_pairs [--rounds N]\n");
      return 2;
    }
  }
  struct Setting {
    int64_t n;
    int bits;
    double skew;
  };
  bool ok = true;
  for (const Setting s : {Setting{32768, 6, 1}, Setting{32768, 7, 1}, Setting{32768, 7, 2}, Setting{32768, 8, 1},
                          Setting{32768, 8, 1.5}, Setting{32768, 8, 2}, Setting{131072, 8, 1}}) {
    const double r = compare(s.n, s.bits, s.skew, rounds);
    if (r < 0) {
      std::printf("FAIL: the two selections disagree (%lld rows, b %d)\n", (long long)s.n, s.bits);
      ok = false;
      continue;
    }
    std::printf("  pairs / rows time = %.2f\n", r);
  }
  return ok ? 0 : 1;
}
