// Benchmark (ctest -L bench, or by hand): kvtool-pq build against faiss::ProductQuantizer used
// directly on the same data with identical k-means settings (iterations, training sample cap,
// threads: one part per worker, single-threaded BLAS in each). Both sides run interleaved, best of
// N (bench_common.h); prints each side's min and median in rows·heads/s, the ratio of the mins and
// the peak RSS of the kvtool-pq process.
//
//   kvtool_bench_pq [--dump PATH] [--threads N] [--layers A-B] [--rounds N]
// Without --dump it synthesizes the 8 layers x 8 kv heads x 32768 tokens x d=128 fp16 dump; by
// default layers 0-3 (32 parts) are built so that the whole comparison fits in ~2 minutes.
#include <faiss/impl/ProductQuantizer.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "parse.h"

using namespace kvtool;

int main(int argc, char** argv) {
  bench::BuildBenchArgs args;
  args.layers = "0-3";
  if (!bench::parse_build_bench_args(argc, argv,
                                     "kvtool_bench_pq [--dump PATH] [--threads N] [--layers A-B] [--rounds N]", args))
    return 2;
  const std::string bin_dir = KVTOOL_BENCH_BIN_DIR, layers = args.layers;
  std::string dump = args.dump;
  const int threads = args.threads, n_rounds = args.rounds;
  if (dump.empty()) dump = bench::ensure_dump();
  DumpReader reader(dump);
  const auto& g = reader.info().geo;
  int64_t lf, ll;
  cli::parse_layers(layers, lf, ll);
  const int64_t m = 2, bits = 6, iters = 25, sink = 32, E = reader.info().committed_frontier;
  const int64_t n = E - sink, parts = (ll - lf + 1) * g.kv_heads;
  const double rows_heads = static_cast<double>(n) * static_cast<double>(parts);
  std::printf("dump [%lld, %lld, %lld, %lld] %s, layers %s; pq m=%lld b=%lld iters=%lld sink=%lld; %d threads\n",
              (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)g.head_dim,
              dtype_name(g.dtype), layers.c_str(), (long long)m, (long long)bits, (long long)iters, (long long)sink,
              threads);

  const std::string out = bench::bench_dir() + "/bench.pq.kvi";
  double rss_mib = 0;
  // kvtool-pq build as its own process (peak RSS of that process alone): reads the dump, binds
  // and hashes it, trains, encodes, compresses and writes.
  auto kvtool_side = [&] {
    return bench::run_child_ok({bin_dir + "/kvtool-pq", "build", dump, "-o", out, "--force", "--threads",
                                std::to_string(threads), "--layers", layers, "--quiet"},
                               &rss_mib);
  };
  // faiss::ProductQuantizer directly: same rows, same k-means settings, same thread count.
  auto faiss_side = [&] {
    return bench::timed_parts(threads, parts, static_cast<size_t>(n * g.head_dim),
                              [&](int64_t p, std::vector<float>& x) {
                                reader.read_k(lf + p / g.kv_heads, p % g.kv_heads, sink, E, x.data());
                                faiss::ProductQuantizer pq(g.head_dim, m, bits);
                                pq.cp.niter = iters;
                                pq.cp.max_points_per_centroid = 256;
                                pq.cp.min_points_per_centroid = 1;
                                pq.cp.seed = static_cast<int>(p);
                                pq.verbose = false;
                                pq.train(n, x.data());
                                std::vector<uint8_t> codes(static_cast<size_t>(n) * pq.code_size);
                                pq.compute_codes(x.data(), codes.data(), n);
                              });
  };
  bench::warm_page_cache(dump);
  bench::Samples sk, sf;
  bench::interleave(n_rounds, kvtool_side, faiss_side, sk, sf);
  const double ratio = bench::report("kvtool-pq build", sk, "faiss ProductQuantizer", sf, rows_heads, "rows*heads/s");
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS of kvtool-pq %.0f MiB (target < 1 GiB)\n", ratio,
              rss_mib);
  std::remove(out.c_str());
  return (ratio >= 0.9 && rss_mib < 1024) ? 0 : 1;
}
