// Benchmark (ctest -L bench, or by hand): kvtool-clusterkv build (default tokens-per-cluster 80,
// 20 iterations, raw-mean centroids) against spherical k-means done with faiss::Clustering directly
// on the same normalized rows with the same settings (clusters, iterations, all rows, threads: one
// part per worker with single-threaded BLAS). Prints rows·heads/s, the ratio and the peak RSS.
//
//   kvtool_bench_clusterkv [--dump PATH] [--threads N] [--layers A-B]
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "parse.h"
#include "kvtool/builder.h"
#include "kvtool/dump.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dump, bin_dir = KVTOOL_BENCH_BIN_DIR, layers = "0-7";
  int threads = cli::default_threads();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc)
      layers = argv[++i];
    else {
      std::fprintf(stderr, "usage: kvtool_bench_clusterkv [--dump PATH] [--threads N] [--layers A-B]\n");
      return 2;
    }
  }
  if (dump.empty()) dump = bench::ensure_dump();
  DumpReader reader(dump);
  const auto& g = reader.info().geo;
  int64_t lf, ll;
  cli::parse_layers(layers, lf, ll);
  const int64_t sink = 16, E = reader.info().committed_frontier, n = E - sink, iters = 20;
  const int64_t k = std::max<int64_t>(1, std::llround(n / 80.0));
  const int64_t parts = (ll - lf + 1) * g.kv_heads;
  const double rows_heads = static_cast<double>(n) * static_cast<double>(parts);
  std::printf(
      "dump [%lld, %lld, %lld, %lld] %s, layers %lld-%lld; %lld clusters per part, %lld iterations; %d threads\n",
      (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)g.head_dim, dtype_name(g.dtype),
      (long long)lf, (long long)ll, (long long)k, (long long)iters, threads);

  std::string out = bench::bench_dir() + "/bench.ckv.kvi";
  bench::ChildRun child = bench::run_child({bin_dir + "/kvtool-clusterkv", "build", dump, "-o", out, "--threads",
                                            std::to_string(threads), "--layers", layers, "--quiet"});
  if (!child.ok) {
    std::fprintf(stderr, "kvtool-clusterkv build failed\n");
    return 1;
  }

  double t_faiss =
      bench::timed_parts(threads, parts, static_cast<size_t>(n * g.head_dim), [&](int64_t p, std::vector<float>& x) {
        reader.read_k(lf + p / g.kv_heads, p % g.kv_heads, sink, E, x.data());
        bench::normalize_rows(x.data(), n, g.head_dim);
        faiss::ClusteringParameters cp = bench::spherical_kmeans_params(iters, p);
        faiss::Clustering clus(static_cast<int>(g.head_dim), static_cast<int>(k), cp);
        faiss::IndexFlatIP index(g.head_dim);
        clus.train(n, x.data(), index);
      });
  double thr_k = rows_heads / child.seconds, thr_f = rows_heads / t_faiss;
  std::printf("kvtool-clusterkv build : %8.2f s  %10.0f rows*heads/s  peak RSS %.0f MiB\n", child.seconds, thr_k,
              child.peak_rss_mib);
  std::printf("faiss spherical k-means: %8.2f s  %10.0f rows*heads/s\n", t_faiss, thr_f);
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS %s 1 GiB\n", thr_k / thr_f,
              child.peak_rss_mib < 1024 ? "<" : ">=");
  std::remove(out.c_str());
  return (thr_k / thr_f >= 0.9 && child.peak_rss_mib < 1024) ? 0 : 1;
}
