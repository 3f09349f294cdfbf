// Benchmark (ctest -L bench, or by hand): kvtool-squeeze build on a synthetic 8 x 8 x 8192 x 128 fp16
// dump with a fixed 20 k-means iterations (5 % fine clusters, coarse 25 %, observation window 100)
// against the same clustering done by FAISS directly (spherical k-means of the normalized keys, then
// L2 k-means of the fine centroids; same counts, iterations, all rows, threads). Prints both times,
// the ratio and kvtool's peak RSS.
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "kvtool/builder.h"
#include "kvtool/dump.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dump, bin_dir = KVTOOL_BENCH_BIN_DIR;
  int threads = cli::default_threads();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: kvtool_bench_squeeze [--dump PATH] [--threads N]\n");
      return 2;
    }
  }
  if (dump.empty()) dump = bench::ensure_dump(8192);
  DumpReader reader(dump);
  const auto& g = reader.info().geo;
  const int64_t E = reader.info().committed_frontier, window = 100, n = E - window, d = g.head_dim, iters = 20;
  const int64_t kf = std::max<int64_t>(1, static_cast<int64_t>(std::floor(0.05 * n)));
  const int64_t kc = std::max<int64_t>(1, std::llround(0.25 * kf));
  const int64_t parts = g.layers * g.kv_heads;
  std::printf("dump [%lld, %lld, %lld, %lld]; %lld fine clusters, %lld coarse groups, %lld iterations; %d threads\n",
              (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)d, (long long)kf,
              (long long)kc, (long long)iters, threads);
  std::string out = bench::bench_dir() + "/bench.sq.kvi";
  bench::ChildRun child = bench::run_child({bin_dir + "/kvtool-squeeze", "build", dump, "-o", out, "--threads",
                                            std::to_string(threads), "--iters", std::to_string(iters), "--quiet"});
  if (!child.ok) {
    std::fprintf(stderr, "kvtool-squeeze build failed\n");
    return 1;
  }
  double t_faiss =
      bench::timed_parts(threads, parts, static_cast<size_t>(n * d), [&](int64_t p, std::vector<float>& x) {
        reader.read_k(p / g.kv_heads, p % g.kv_heads, 0, n, x.data());
        bench::normalize_rows(x.data(), n, d);
        faiss::ClusteringParameters cp = bench::spherical_kmeans_params(iters, p);
        faiss::Clustering fine(static_cast<int>(d), static_cast<int>(kf), cp);
        faiss::IndexFlatIP ip(d);
        fine.train(n, x.data(), ip);
        cp.spherical = false;
        faiss::Clustering coarse(static_cast<int>(d), static_cast<int>(kc), cp);
        faiss::IndexFlatL2 l2(d);
        coarse.train(kf, fine.centroids.data(), l2);
      });
  double ratio = t_faiss / child.seconds;
  std::printf("kvtool-squeeze build : %7.2f s  peak RSS %.0f MiB\n", child.seconds, child.peak_rss_mib);
  std::printf("faiss direct         : %7.2f s\n", t_faiss);
  std::printf("speed ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS %s 1 GiB\n", ratio,
              child.peak_rss_mib < 1024 ? "<" : ">=");
  std::remove(out.c_str());
  return ratio >= 0.9 && child.peak_rss_mib < 1024 ? 0 : 1;
}
