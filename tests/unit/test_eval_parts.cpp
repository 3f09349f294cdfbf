// eval's dense reference (BLAS, a block of queries at a time) against plain double loops, and the
// oracle's mass and recall (nth_element) against a full stable sort, with ties.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "impl/eval_kernels.h"
#include "impl/eval_parts.h"

using namespace kvtool;

namespace {

// K, V [E, d] and Q [n, d] with N(0, sigma) entries, and their dense block computed by eval.
struct RandomBlock {
  int64_t E, d, n;
  std::vector<float> K, V, Q;
  eval::DenseSupport s;
  eval::DenseBlock b;
  RandomBlock(unsigned seed, float sigma, int64_t rows, int64_t dim, int64_t queries)
      : E(rows), d(dim), n(queries), K(E * d), V(E * d), Q(n * d) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0, sigma);
    for (auto* v : {&K, &V, &Q})
      for (auto& x : *v) x = N(rng);
    s.load(K.data(), V.data(), E, d);
    std::vector<double> Qd(Q.begin(), Q.end());
    b.compute(Qd.data(), n, s);
  }
  // Query i's logits q·k/sqrt(d) by plain double loops.
  std::vector<double> logits(int64_t i) const {
    std::vector<double> z(E);
    for (int64_t r = 0; r < E; ++r) {
      for (int64_t t = 0; t < d; ++t) z[r] += double(Q[i * d + t]) * K[r * d + t];
      z[r] /= std::sqrt(double(d));
    }
    return z;
  }
};

}  // namespace

TEST_CASE("eval: the BLAS dense block equals per-query double loops") {
  const RandomBlock rb(3, 1.5f, 301, 16, 7);
  const int64_t E = rb.E, d = rb.d, n = rb.n;
  const std::vector<float>& V = rb.V;
  const eval::DenseBlock& b = rb.b;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<double> z = rb.logits(i);
    std::vector<double> o(d, 0.0);
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double x : z) sum += std::exp(x - mx);
    const auto ref = b.row(i);
    for (int64_t r = 0; r < E; ++r) {
      const double p = std::exp(z[r] - mx) / sum;
      REQUIRE(std::abs(ref.p[r] - p) <= 1e-12 * p + 1e-300);
      for (int64_t t = 0; t < d; ++t) o[t] += p * V[r * d + t];
    }
    for (int64_t t = 0; t < d; ++t) REQUIRE(std::abs(ref.o[t] - o[t]) <= 1e-12);
    REQUIRE(std::abs(ref.log_normalizer - (mx + std::log(sum))) <= 1e-12);
  }
}

namespace {

// A block of one query whose probabilities are `p` (the oracle and the metrics read only P).
eval::DenseBlock block_of(const std::vector<double>& p, int64_t d) {
  eval::DenseBlock b;
  b.n = 1;
  b.E = static_cast<int64_t>(p.size());
  b.d = d;
  b.P = p;
  b.O.assign(static_cast<size_t>(d), 0.0);
  b.log_normalizer = {0.0};
  return b;
}

// The oracle by definition: a full stable sort by p descending (ties by lower row).
void oracle_by_sort(const std::vector<double>& p, const std::vector<int64_t>& kept_rows, int64_t rows, double& mass,
                    double& recall) {
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  mass = 0;
  double hit = 0;
  for (int64_t i = 0; i < rows; ++i) {
    mass += p[order[i]];
    hit += std::count(kept_rows.begin(), kept_rows.end(), order[i]);
  }
  recall = rows ? hit / rows : 1.0;
}

}  // namespace

// DenseBlock::compute fills the oracle row by row (eval's path); build() does it after the block.
TEST_CASE("eval: the oracle filled during the softmax equals the oracle built afterwards") {
  RandomBlock rb(7, 2.0f, 2600, 16, 5);
  std::vector<double> Qd(rb.Q.begin(), rb.Q.end());
  eval::OracleIndex fused, after;
  rb.b.compute(Qd.data(), rb.n, rb.s, &fused);
  after.build(rb.b);
  std::vector<uint64_t> kept(static_cast<size_t>((rb.E + 63) / 64), 0);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < rb.E; r += 3) {
    kept[static_cast<size_t>(r / 64)] |= uint64_t{1} << (r % 64);
    ids.push_back(r);
  }
  for (int64_t i = 0; i < rb.n; ++i)
    for (int64_t rows : {1, 50, 867, 2600}) {
      double m1 = 0, m2 = 0;
      int64_t h1 = 0, h2 = 0;
      fused.measure(i, rows, ids, kept, m1, h1);
      after.measure(i, rows, ids, kept, m2, h2);
      REQUIRE(m1 == m2);
      REQUIRE(h1 == h2);
    }
}

TEST_CASE("eval: oracle mass and recall equal a full stable sort's, ties included") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t E = 1 + rng() % 400;
    std::vector<double> p(E);
    // Few distinct values (many ties, inside one bucket and across buckets), or a wide spread of
    // magnitudes down to 0 and below 2^-126 (the lowest bucket).
    for (auto& x : p) x = trial % 2 ? double(rng() % 6) / 8 : std::ldexp(1.0 + rng() % 7, -int(rng() % 300));
    const eval::DenseBlock b = block_of(p, 4);
    eval::OracleIndex oi;
    oi.build(b);
    CandidateReceipt rc;
    for (int64_t i = 0; i < E; ++i)
      if (rng() % 3 == 0) rc.candidates.push_back(i);
    std::shuffle(rc.candidates.begin(), rc.candidates.end(), rng);  // receipts need not be sorted
    eval::ReceiptMetrics m;
    m.measure(b.row(0), rc, oi, 0, E);
    std::vector<int64_t> sorted = rc.candidates;
    std::sort(sorted.begin(), sorted.end());
    const int64_t rows = static_cast<int64_t>(rc.candidates.size());
    REQUIRE(m.rows == rows);
    REQUIRE(m.ids == sorted);
    double oracle = 0, recall = 0;
    oracle_by_sort(p, sorted, rows, oracle, recall);
    REQUIRE(m.oracle == Approx(oracle).epsilon(1e-12).margin(1e-300));
    REQUIRE(m.recall == Approx(recall).margin(1e-12));
  }
}

// End to end against plain double loops: every metric of eval's parts (BLAS block, bucketed oracle,
// kept outputs by gathering and by the masked GEMM) for receipts of 1% to 100% of the rows.
TEST_CASE("eval: metrics of the BLAS parts equal a scalar double reference, both output paths") {
  namespace sc = kvtool::scoring;
  const int level = GENERATE(0, 1, 2);  // every SIMD level this CPU runs (the kernels dispatch on it)
  if (level > static_cast<int>(sc::simd_supported())) return;
  sc::set_simd_level(static_cast<sc::Simd>(level));
  struct Restore {
    ~Restore() { kvtool::scoring::set_simd_level(kvtool::scoring::Simd::avx512); }  // the best the CPU runs
  } restore;
  INFO("level " << sc::simd_name(sc::simd_level()));
  const int64_t dim = GENERATE(8, 32);          // 32: the register-blocked gather
  const RandomBlock rb(5, 2.0f, 2600, dim, 6);  // two tiles of rows, the second partial
  const int64_t E = rb.E, d = rb.d, n = rb.n;
  const std::vector<float>& V = rb.V;
  const eval::DenseSupport& s = rb.s;
  const eval::DenseBlock& b = rb.b;
  std::mt19937 rng(5);
  eval::OracleIndex oi;
  oi.build(b);
  for (double frac : {0.01, 0.1, 0.3, 1.0}) {
    std::vector<eval::ReceiptMetrics> ms(n);
    std::vector<std::vector<int64_t>> kept(n);
    for (int64_t i = 0; i < n; ++i) {
      CandidateReceipt rc;
      for (int64_t r = 0; r < E; ++r)
        if (std::uniform_real_distribution<double>(0, 1)(rng) < frac) rc.candidates.push_back(r);
      rc.always_included = {0, E - 1, E + 3};  // a row past the support is not kept
      ms[i].measure(b.row(i), rc, oi, i, E);
      kept[i] = ms[i].ids;
    }
    eval::KeptOutputs ko;
    ko.compute(b, ms, s);
    INFO("fraction " << frac << " gemm " << eval::KeptOutputs::use_gemm(ms, n, E));
    for (int64_t i = 0; i < n; ++i) {
      ms[i].output(b.row(i), ko.out.data() + i * d, d);
      const std::vector<double> z = rb.logits(i);
      std::vector<double> p(E), o(d, 0.0), ko_ref(d, 0.0);
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0, retained = 0;
      for (double x : z) sum += std::exp(x - mx);
      for (int64_t r = 0; r < E; ++r) {
        p[r] = std::exp(z[r] - mx) / sum;
        for (int64_t t = 0; t < d; ++t) o[t] += p[r] * V[r * d + t];
      }
      for (int64_t r : kept[i]) {
        retained += p[r];
        for (int64_t t = 0; t < d; ++t) ko_ref[t] += p[r] * V[r * d + t];
      }
      double err = 0, on = 0;
      for (int64_t t = 0; t < d; ++t) {
        err += std::pow(ko_ref[t] / retained - o[t], 2);
        on += o[t] * o[t];
      }
      double oracle = 0, recall = 0;
      oracle_by_sort(p, kept[i], static_cast<int64_t>(kept[i].size()), oracle, recall);
      CHECK(ms[i].retained == Approx(retained).epsilon(1e-12));
      CHECK(ms[i].oracle == Approx(oracle).epsilon(1e-12));
      CHECK(ms[i].recall == Approx(recall).margin(1e-12));
      CHECK(ms[i].error == Approx(std::sqrt(err)).epsilon(1e-9).margin(1e-13));
      CHECK(ms[i].relative_error == Approx(std::sqrt(err / on)).epsilon(1e-9).margin(1e-13));
      CHECK(ms[i].fraction == Approx(double(kept[i].size()) / E));
    }
  }
}

// The softmax, widening and gather kernels at every level against plain double loops with
// std::exp; AVX-512 and AVX2 share one polynomial and must agree bit for bit.
TEST_CASE("eval kernels: softmax, widen and gather at every SIMD level") {
  namespace sc = kvtool::scoring;
  const auto best = sc::simd_supported();
  std::mt19937 rng(11);
  std::normal_distribution<double> N(0, 4);
  for (auto [n, far] : {std::pair<int64_t, int64_t>{1, -1},
                        {7, -1},
                        {8, -1},
                        {9, -1},
                        {64, -1},
                        {1003, -1},
                        {64, 3},
                        {64, 5},
                        {1003, 12},
                        {1003, 1001}}) {
    for (int seed = 0; seed < 20; ++seed) {
      std::vector<double> z(n);
      for (auto& x : z) x = N(rng);
      if (far >= 0) z[far] = *std::max_element(z.begin(), z.end()) - 800;  // below the polynomial's range: std::exp
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (double x : z) sum += std::exp(x - mx);
      std::vector<std::vector<double>> got;
      for (int level = 0; level <= static_cast<int>(best); ++level) {
        std::vector<double> p = z;
        const double lse = eval::softmax_row(p.data(), n, static_cast<sc::Simd>(level));
        INFO("level " << level << " n " << n);
        CHECK(lse == Approx(mx + std::log(sum)).epsilon(1e-14));
        for (int64_t r = 0; r < n; ++r) REQUIRE(std::abs(p[r] - std::exp(z[r] - mx) / sum) <= 1e-14 * p[r] + 1e-300);
        got.push_back(p);
      }
      if (got.size() == 3) REQUIRE(std::memcmp(got[1].data(), got[2].data(), n * sizeof(double)) == 0);
    }
  }
  for (int64_t d : {8, 32, 40, 128}) {
    const int64_t rows = 300;
    std::vector<float> V(rows * d);
    for (auto& v : V) v = static_cast<float>(N(rng));
    std::vector<int64_t> ids;
    std::vector<double> w;
    for (int64_t r = 0; r < rows; r += 1 + static_cast<int64_t>(rng() % 3)) {
      ids.push_back(r);
      w.push_back(std::abs(N(rng)));
    }
    std::vector<double> want(d, 0.5);
    for (size_t k = 0; k < ids.size(); ++k)
      for (int64_t t = 0; t < d; ++t) want[t] += w[k] * V[ids[k] * d + t];
    for (int level = 0; level <= static_cast<int>(best); ++level) {
      std::vector<double> acc(d, 0.5), wide(V.size());
      eval::add_rows(w.data(), ids.data(), ids.size(), V.data(), d, acc.data(), static_cast<sc::Simd>(level));
      for (int64_t t = 0; t < d; ++t) REQUIRE(acc[t] == Approx(want[t]).epsilon(1e-13).margin(1e-12));
      eval::widen(V.data(), wide.data(), static_cast<int64_t>(V.size()), static_cast<sc::Simd>(level));
      for (size_t i = 0; i < V.size(); ++i) REQUIRE(wide[i] == static_cast<double>(V[i]));
    }
  }
}
