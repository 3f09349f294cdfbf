// Benchmark (ctest -L bench, or by hand): kvtool-lsh build on the synthetic 8 x 8 x 32768 x 128
// fp16 dump (K=10, L=150; rows·tables/s, table bytes, peak RSS), then query throughput of one part
// (queries/s for K=10, L=150 on its 32768 - 68 indexed rows, inclusion probabilities included).
//
//   kvtool_bench_lsh [--dump PATH] [--threads N] [--layers A-B] [--queries N]
#include <chrono>
#include <cstdio>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/query.h"
#include "kvtool/report.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dump, bin_dir = KVTOOL_BENCH_BIN_DIR, layers = "0-7";
  int threads = cli::default_threads();
  int64_t nq = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc)
      layers = argv[++i];
    else if (a == "--queries" && i + 1 < argc)
      nq = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: kvtool_bench_lsh [--dump PATH] [--threads N] [--layers A-B] [--queries N]\n");
      return 2;
    }
  }
  if (dump.empty()) dump = bench::ensure_dump();
  std::string out = bench::bench_dir() + "/bench.lsh.kvi";
  bench::ChildRun child = bench::run_child({bin_dir + "/kvtool-lsh", "build", dump, "-o", out, "--threads",
                                            std::to_string(threads), "--layers", layers, "--quiet"});
  if (!child.ok) {
    std::fprintf(stderr, "kvtool-lsh build failed\n");
    return 1;
  }
  ArtifactReader art(out);
  json ks = inspect_artifact(out).kind_summary.value();  // lsh artifacts have a kind summary
  const auto& g = art.source().geo;
  IndexedRows rows = IndexedRows::of(art);
  const int64_t parts = static_cast<int64_t>(art.manifest()["kind_data"]["parts"].size()), L = 150;
  double rows_tables = static_cast<double>(rows.count()) * L * parts;
  std::printf("kvtool-lsh build (K=10, L=150, %lld parts, %d threads): %.2f s, %.3g rows*tables/s, peak RSS %.0f MiB\n",
              (long long)parts, threads, child.seconds, rows_tables / child.seconds, child.peak_rss_mib);
  std::printf(
      "table bytes: %.1f MiB raw, %.1f MiB stored (zstd); artifact %.1f MiB; empty buckets %.3f, max bucket %lld\n",
      ks["table_bytes_raw"].get<double>() / 1048576, ks["table_bytes_stored"].get<double>() / 1048576,
      static_cast<double>(art.file_size()) / 1048576, ks["bucket_empty_fraction_mean"].get<double>(),
      (long long)ks["bucket_max"].get<int64_t>());

  DumpReader d(dump);
  const auto& dg = d.info().geo;
  const int64_t E = rows.coverage_end, dim = g.head_dim;
  std::vector<float> keys(static_cast<size_t>(E * dim)), qs(static_cast<size_t>(dg.q_tokens * dim));
  d.read_k(0, 0, 0, E, keys.data());
  d.read_q(0, 0, qs.data());
  KeyRows kr{keys.data(), E, dim};
  SelectorSet sel(art);
  sel.part(0, 0);  // load outside the timing
  size_t sampled = 0;
  auto t0 = Clock::now();
  for (int64_t i = 0; i < nq; ++i) {
    std::vector<float> q(qs.begin() + (i % dg.q_tokens) * dim, qs.begin() + (i % dg.q_tokens + 1) * dim);
    q[i % dim] += 1e-3f * static_cast<float>(i);  // distinct queries
    sampled += sel.query(0, 0, q.data(), E, *sel.params(), &kr).candidates.size();
  }
  double t = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("query (one part, %lld indexed rows, c=2): %.0f queries/s, %.1f rows sampled per query\n",
              (long long)rows.count(), nq / t, static_cast<double>(sampled) / nq);
  std::remove(out.c_str());
  return child.peak_rss_mib < 1024 ? 0 : 1;
}
