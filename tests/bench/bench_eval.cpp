// Benchmark (ctest -L bench, or by hand) of `kvtool eval` on a 32K-row dump (1 layer x 8 kv heads
// x 32 query heads x 32,768 rows x d 128 f16, 64 query positions, seed 1; a pq artifact with
// --prefix 32704), against two floors measured in the same run (interleaved, best of N,
// bench_common.h):
//  * `kvtool verify` of the dump, for scale: eval must take at most 3x its time (the bench fails
//    when it takes longer);
//  * the BLAS floor: the two double GEMMs of the dense reference eval must compute (logits
//    Q·K^T and outputs P·V for the 256 queries of each kv head), run in-process on as many workers
//    as eval uses (single-threaded BLAS each), on buffers touched before the clock starts.
// Also fails when eval beats the GEMM floor (it cannot have computed the dense reference).
//
//   kvtool_bench_eval [--rounds N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

extern "C" int dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                      const double* beta, double* c, const int* ldc);

using namespace kvtool;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kE = 32704, kD = 128, kQueries = 4 * 64, kKvHeads = 8;

// One worker's buffers for one kv head: K, V [E, d], Q [n, d], P [n, E], O [n, d], all touched.
struct GemmBuffers {
  std::vector<double> K, V, Q, P, O;
  GemmBuffers()
      : K(size_t{kE} * kD, 0.01),
        V(K.size(), 0.02),
        Q(size_t{kQueries} * kD, 0.03),
        P(size_t{kQueries} * kE, 0.0),
        O(size_t{kQueries} * kD, 0.0) {}
  void run() {
    const int m = kE, n = kQueries, k = kD;
    const double one = 1, zero = 0;
    dgemm_("T", "N", &m, &n, &k, &one, K.data(), &k, Q.data(), &k, &zero, P.data(), &m);
    dgemm_("N", "N", &k, &n, &m, &one, V.data(), &k, P.data(), &m, &zero, O.data(), &k);
  }
};

// The dense reference's GEMMs for every kv head on `threads` workers; seconds.
double gemm_floor(int threads, std::vector<GemmBuffers>& bufs) {
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      pin_blas_single_thread();
      for (int h = t; h < kKvHeads; h += threads) bufs[static_cast<size_t>(t)].run();
    });
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int n_rounds = bench::rounds(3);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      n_rounds = std::max(3, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: kvtool_bench_eval [--rounds N]\n");
      return 2;
    }
  }
  const std::string kvtool = std::string(KVTOOL_BENCH_BIN_DIR) + "/kvtool";
  const std::string dump = bench::ensure_dump(32768, 1, 64), art = bench::bench_dir() + "/eval-pq.kvi";
  bench::run_child_ok({kvtool, "build", "pq", dump, "--prefix", std::to_string(kE), "-o", art, "-q", "--force"});
  bench::warm_page_cache(dump);
  const int threads = static_cast<int>(std::min(kKvHeads, std::max(1, int(std::thread::hardware_concurrency()))));
  std::vector<GemmBuffers> bufs(static_cast<size_t>(threads));
  bench::Samples s_eval, s_verify, s_gemm, s_unused;
  double rss = 0;
  bench::interleave(
      n_rounds,
      [&] {
        return bench::run_child_ok({kvtool, "eval", art, "--source", dump, "--json"}, &rss);
      },
      [&] {
        return bench::run_child_ok({kvtool, "verify", dump});
      },
      s_eval, s_verify);
  for (int i = 0; i < n_rounds; ++i) s_gemm.s.push_back(gemm_floor(threads, bufs));
  const double gflop = 2.0 * 2.0 * kE * kD * double(kQueries) * kKvHeads / 1e9;
  std::printf("kvtool eval of a pq artifact, 1 x 8 kv x 32 q heads x 32K x d128, 64 positions (%d threads):\n",
              threads);
  bench::report("kvtool eval", s_eval, "kvtool verify (dump)", s_verify);
  std::printf("  eval peak RSS %.0f MiB\n", rss);
  std::printf("BLAS floor: the dense reference's two double GEMMs, %.1f GFLOP on %d workers:\n", gflop, threads);
  bench::report("kvtool eval", s_eval, "dgemm floor", s_gemm);
  const double to_verify = s_eval.min() / s_verify.min(), to_gemm = s_eval.min() / s_gemm.min();
  constexpr double kTarget = 3.0;
  std::printf(
      "eval %.2fx verify (target: at most %.1fx), %.2fx the dgemm floor (%.1f GFLOP/s at the floor); the "
      "floor alone is %.2fx verify\n",
      to_verify, kTarget, to_gemm, gflop / s_gemm.min(), s_gemm.min() / s_verify.min());
  std::remove(art.c_str());
  int rc = 0;
  if (s_eval.min() < s_gemm.min()) {
    std::printf("FAIL: eval beat the GEMM floor of its dense reference\n");
    rc = 1;
  }
  if (to_verify > kTarget) {
    std::printf("FAIL: eval took %.2fx verify, above the %.1fx target\n", to_verify, kTarget);
    rc = 1;
  }
  return rc;
}
