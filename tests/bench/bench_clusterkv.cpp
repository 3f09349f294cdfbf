// Benchmark (ctest -L bench, or by hand): kvtool-clusterkv build --kmeans flat (default
// tokens-per-cluster 80, 20 iterations, raw-mean centroids) against spherical k-means done with
// faiss::Clustering directly on the same normalized rows with the same settings (clusters,
// iterations, all rows, threads: one part per worker with single-threaded BLAS): the overhead of
// kvtool around FAISS. Both sides interleaved, best of N (bench_common.h); prints each side's min
// and median in rows·heads/s, the ratio of the mins and the peak RSS. Then the tree k-means
// (--kmeans tree, what auto picks at this size) against that flat build: its speed-up
// and peak RSS (its quality against flat is gated by tests/quality/test_clusterkv_quality.sh).
//
//   kvtool_bench_clusterkv [--dump PATH] [--threads N] [--layers A-B] [--rounds N]
// By default layer 0 only (8 parts), so that the whole comparison fits in ~2 minutes.
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <cmath>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "parse.h"

using namespace kvtool;

int main(int argc, char** argv) {
  bench::BuildBenchArgs args;
  args.layers = "0-0";
  if (!bench::parse_build_bench_args(
          argc, argv, "kvtool_bench_clusterkv [--dump PATH] [--threads N] [--layers A-B] [--rounds N]", args))
    return 2;
  const std::string bin_dir = KVTOOL_BENCH_BIN_DIR, layers = args.layers;
  std::string dump = args.dump;
  const int threads = args.threads, n_rounds = args.rounds;
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

  const std::string out = bench::bench_dir() + "/bench.ckv.kvi";
  double rss_mib = 0, rss_tree = 0;
  auto kvtool_build = [&](const char* method, double* rss) {
    return bench::run_child_ok({bin_dir + "/kvtool-clusterkv", "build", dump, "-o", out, "--force", "--threads",
                                std::to_string(threads), "--layers", layers, "--kmeans", method, "--quiet"},
                               rss);
  };
  auto kvtool_side = [&] { return kvtool_build("flat", &rss_mib); };
  auto faiss_side = [&] {
    return bench::timed_parts(threads, parts, static_cast<size_t>(n * g.head_dim),
                              [&](int64_t p, std::vector<float>& x) {
                                reader.read_k(lf + p / g.kv_heads, p % g.kv_heads, sink, E, x.data());
                                bench::normalize_rows(x.data(), n, g.head_dim);
                                faiss::ClusteringParameters cp = bench::spherical_kmeans_params(iters, p);
                                faiss::Clustering clus(static_cast<int>(g.head_dim), static_cast<int>(k), cp);
                                faiss::IndexFlatIP index(g.head_dim);
                                clus.train(n, x.data(), index);
                              });
  };
  bench::warm_page_cache(dump);
  bench::Samples sk, sf;
  bench::interleave(n_rounds, kvtool_side, faiss_side, sk, sf);
  const double ratio =
      bench::report("kvtool-clusterkv build", sk, "faiss spherical k-means", sf, rows_heads, "rows*heads/s");
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS of kvtool-clusterkv %.0f MiB (target < 1 GiB)\n",
              ratio, rss_mib);
  bench::Samples st;
  for (int r = 0; r < n_rounds; ++r) st.s.push_back(kvtool_build("tree", &rss_tree));
  const double speedup = bench::report("kvtool-clusterkv --kmeans tree", st, "kvtool-clusterkv --kmeans flat", sk,
                                       rows_heads, "rows*heads/s");
  std::printf("tree speed-up over flat = %.2fx; peak RSS of the tree build %.0f MiB (target < 1 GiB)\n", speedup,
              rss_tree);
  std::remove(out.c_str());
  return (ratio >= 0.9 && rss_mib < 1024 && rss_tree < 1024) ? 0 : 1;
}
