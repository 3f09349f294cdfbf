// Benchmark (ctest -L bench, or by hand): kvtool-squeeze build --kmeans flat on a synthetic
// 8 x 8 x 8192 x 128 fp16 dump with a fixed 20 k-means iterations (5 % fine clusters, coarse 25 %,
// observation window 100) against the same clustering done by FAISS directly (spherical k-means of
// the normalized keys, then L2 k-means of the fine centroids; same counts, iterations, all rows,
// threads): the overhead of kvtool around FAISS. Both sides interleaved, best of N
// (bench_common.h); prints each side's min and median, the ratio of the mins and kvtool's peak RSS.
// Then the tree k-means (--kmeans tree, what auto picks at this size) against that flat
// build: its speed-up and peak RSS (its quality is gated by tests/quality/test_squeeze_quality.sh).
//
//   kvtool_bench_squeeze [--dump PATH] [--threads N] [--layers A-B] [--rounds N]
// By default layers 0-3 (32 parts), so that the whole comparison fits in ~2 minutes.
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
  args.layers = "0-3";
  if (!bench::parse_build_bench_args(
          argc, argv, "kvtool_bench_squeeze [--dump PATH] [--threads N] [--layers A-B] [--rounds N]", args))
    return 2;
  const std::string bin_dir = KVTOOL_BENCH_BIN_DIR, layers = args.layers;
  std::string dump = args.dump;
  const int threads = args.threads, n_rounds = args.rounds;
  if (dump.empty()) dump = bench::ensure_dump(8192);
  DumpReader reader(dump);
  const auto& g = reader.info().geo;
  int64_t lf, ll;
  cli::parse_layers(layers, lf, ll);
  const int64_t E = reader.info().committed_frontier, window = 100, n = E - window, d = g.head_dim, iters = 20;
  const int64_t kf = std::max<int64_t>(1, static_cast<int64_t>(std::floor(0.05 * n)));
  const int64_t kc = std::max<int64_t>(1, std::llround(0.25 * kf));
  const int64_t parts = (ll - lf + 1) * g.kv_heads;
  std::printf(
      "dump [%lld, %lld, %lld, %lld], layers %s; %lld fine clusters, %lld coarse groups, %lld iterations; %d threads\n",
      (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)d, layers.c_str(), (long long)kf,
      (long long)kc, (long long)iters, threads);
  const std::string out = bench::bench_dir() + "/bench.sq.kvi";
  double rss_mib = 0, rss_tree = 0;
  auto kvtool_build = [&](const char* method, double* rss) {
    return bench::run_child_ok(
        {bin_dir + "/kvtool-squeeze", "build", dump, "-o", out, "--force", "--threads", std::to_string(threads),
         "--layers", layers, "--iters", std::to_string(iters), "--kmeans", method, "--quiet"},
        rss);
  };
  auto kvtool_side = [&] { return kvtool_build("flat", &rss_mib); };
  auto faiss_side = [&] {
    return bench::timed_parts(threads, parts, static_cast<size_t>(n * d), [&](int64_t p, std::vector<float>& x) {
      reader.read_k(lf + p / g.kv_heads, p % g.kv_heads, 0, n, x.data());
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
  };
  bench::warm_page_cache(dump);
  bench::Samples sk, sf;
  bench::interleave(n_rounds, kvtool_side, faiss_side, sk, sf);
  const double ratio = bench::report("kvtool-squeeze build", sk, "faiss two-level k-means", sf,
                                     static_cast<double>(n) * static_cast<double>(parts), "rows*heads/s");
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS of kvtool-squeeze %.0f MiB (target < 1 GiB)\n",
              ratio, rss_mib);
  bench::Samples st;
  for (int r = 0; r < n_rounds; ++r) st.s.push_back(kvtool_build("tree", &rss_tree));
  const double speedup = bench::report("kvtool-squeeze --kmeans tree", st, "kvtool-squeeze --kmeans flat", sk,
                                       static_cast<double>(n) * static_cast<double>(parts), "rows*heads/s");
  std::printf("tree speed-up over flat = %.2fx; peak RSS of the tree build %.0f MiB (target < 1 GiB)\n", speedup,
              rss_tree);
  std::remove(out.c_str());
  return ratio >= 0.9 && rss_mib < 1024 && rss_tree < 1024 ? 0 : 1;
}
