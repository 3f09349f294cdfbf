// scoring::top_k and rank_all against a full sort with the documented order (kvtool/scoring.h):
// score descending, equal scores by lower index; -0 and +0 are equal scores.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "kvtool/scoring.h"

namespace {

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
    }
    REQUIRE(kvtool::scoring::rank_all(s.data(), n) == want);
  }
}
