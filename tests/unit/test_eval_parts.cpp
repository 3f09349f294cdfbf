// eval's dense reference (BLAS, a block of queries at a time) against plain double loops, and the
// oracle's mass and recall (nth_element) against a full stable sort, with ties.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "impl/eval_parts.h"

using namespace kvtool;

TEST_CASE("eval: the BLAS dense block equals per-query double loops") {
  std::mt19937 rng(3);
  std::normal_distribution<float> N(0, 1.5f);
  const int64_t E = 301, d = 16, n = 7;
  std::vector<float> K(E * d), V(E * d), Q(n * d);
  for (auto* v : {&K, &V, &Q})
    for (auto& x : *v) x = N(rng);
  eval::DenseSupport s;
  s.load(K.data(), V.data(), E, d);
  std::vector<double> Qd(Q.begin(), Q.end());
  eval::DenseBlock b;
  b.compute(Qd.data(), n, s);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> z(E), o(d, 0.0);
    for (int64_t r = 0; r < E; ++r) {
      for (int64_t t = 0; t < d; ++t) z[r] += double(Q[i * d + t]) * K[r * d + t];
      z[r] /= std::sqrt(double(d));
    }
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

TEST_CASE("eval: oracle mass and recall equal a full stable sort's, ties included") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t E = 1 + rng() % 400;
    std::vector<double> p(E);
    for (auto& x : p) x = double(rng() % 6) / 8;  // few distinct values: many ties
    eval::DenseReference ref;
    ref.p = p.data();
    std::vector<double> o(4, 0.0);
    ref.o = o.data();
    CandidateReceipt rc;
    for (int64_t i = 0; i < E; ++i)
      if (rng() % 3 == 0) rc.candidates.push_back(i);
    std::vector<float> V(E * 4, 1.0f);
    eval::ReceiptMetrics m;
    m.measure(ref, rc, V.data(), E, 4);
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    const int64_t rows = static_cast<int64_t>(rc.candidates.size());
    REQUIRE(m.rows == rows);
    double oracle = 0, hit = 0;
    for (int64_t i = 0; i < rows; ++i) {
      oracle += p[order[i]];
      hit += std::count(rc.candidates.begin(), rc.candidates.end(), order[i]);
    }
    REQUIRE(m.oracle == Approx(oracle).margin(1e-12));
    REQUIRE(m.recall == Approx(rows ? hit / rows : 1.0).margin(1e-12));
  }
}
