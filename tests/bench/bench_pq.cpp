// Benchmark (ctest -L bench, or by hand): kvtool-pq build against faiss::ProductQuantizer used
// directly on the same data with identical k-means settings (iterations, training sample cap,
// threads: one part per worker, single-threaded BLAS in each). Prints throughputs in rows·heads/s,
// their ratio, and the peak RSS of the kvtool-pq process.
//
//   kvtool_bench_pq [--dump PATH] [--threads N] [--keep]
// Without --dump it synthesizes the 8 layers x 8 kv heads x 32768 tokens x d=128 fp16 dump.
#include <faiss/impl/ProductQuantizer.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/producers.h"
#include "bench_common.h"
#include "env.h"  // tools/common

using namespace kvtool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dump, bin_dir = KVTOOL_BENCH_BIN_DIR;
  int threads = cli::default_threads();
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--keep")
      keep = true;
    else {
      std::fprintf(stderr, "usage: kvtool_bench_pq [--dump PATH] [--threads N] [--keep]\n");
      return 2;
    }
  }
  if (dump.empty()) dump = bench::ensure_dump();
  DumpReader reader(dump);
  const auto& g = reader.info().geo;
  const int64_t m = 2, bits = 6, iters = 25, sink = 32, E = reader.info().committed_frontier;
  const int64_t n = E - sink, parts = g.layers * g.kv_heads;
  const double rows_heads = static_cast<double>(n) * static_cast<double>(parts);
  std::printf("dump [%lld, %lld, %lld, %lld] %s; pq m=%lld b=%lld iters=%lld sink=%lld; %d threads\n",
              (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)g.head_dim,
              dtype_name(g.dtype), (long long)m, (long long)bits, (long long)iters, (long long)sink, threads);

  // 1. kvtool-pq build as its own process (peak RSS of that process alone).
  std::string out = bench::bench_dir() + "/bench.pq.kvi";
  bench::ChildRun child = bench::run_child(
      {bin_dir + "/kvtool-pq", "build", dump, "-o", out, "--threads", std::to_string(threads), "--quiet"});
  if (!child.ok) {
    std::fprintf(stderr, "kvtool-pq build failed\n");
    return 1;
  }
  double t_kvtool = child.seconds, rss_mib = child.peak_rss_mib;

  // 2. faiss::ProductQuantizer directly: same rows, same k-means settings, same thread count.
  double t_faiss =
      bench::timed_parts(threads, parts, static_cast<size_t>(n * g.head_dim), [&](int64_t p, std::vector<float>& x) {
        reader.read_k(p / g.kv_heads, p % g.kv_heads, sink, E, x.data());
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

  double thr_k = rows_heads / t_kvtool, thr_f = rows_heads / t_faiss;
  std::printf("kvtool-pq build : %8.2f s  %12.0f rows*heads/s  peak RSS %.0f MiB\n", t_kvtool, thr_k, rss_mib);
  std::printf("faiss PQ direct : %8.2f s  %12.0f rows*heads/s\n", t_faiss, thr_f);
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS %s 1 GiB\n", thr_k / thr_f,
              rss_mib < 1024 ? "<" : ">=");
  if (!keep) std::remove(out.c_str());
  return (thr_k / thr_f >= 0.9 && rss_mib < 1024) ? 0 : 1;
}
