// Benchmark (ctest -L bench, or by hand): kvtool-lsh build on the synthetic 8 x 8 x 32768 x 128
// fp16 dump (K=10, L=150) against the same SimHash tables made with FAISS directly: mean-centred
// keys, Gaussian projections [K·L, d] applied by faiss::LinearTransform (the BLAS path of
// faiss::IndexLSH), sign bits, and a counting sort per table into CSR buckets; same rows, threads
// (one part per worker, single-threaded BLAS). Both sides interleaved, best of N (bench_common.h):
// min, median, ratio of the mins; then table bytes, peak RSS, and query throughput of one part
// (queries/s for K=10, L=150 on its 32768 - 68 indexed rows, inclusion probabilities included).
//
//   kvtool_bench_lsh [--dump PATH] [--threads N] [--layers A-B] [--queries N] [--rounds N]
// By default layers 0-3 (32 parts), so that the whole comparison fits in ~2 minutes.
#include <faiss/VectorTransform.h>
#include <faiss/utils/random.h>

#include <chrono>
#include <cstdio>

#include "bench_common.h"
#include "env.h"  // tools/common
#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "parse.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

namespace {
// One part's tables the FAISS way: x [n, d] (centred in place), codes of K bits for L tables,
// CSR offsets [L, 2^K + 1] and ids [L, n]. Returns the ids' checksum so nothing is optimized away.
uint64_t faiss_lsh_part(std::vector<float>& x, int64_t n, int64_t d, int64_t K, int64_t L, int64_t seed) {
  std::vector<double> mu(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mu[j] += x[i * d + j];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) x[i * d + j] -= static_cast<float>(mu[j] / static_cast<double>(n));
  faiss::LinearTransform lt(static_cast<int>(d), static_cast<int>(K * L), false);
  lt.A.resize(static_cast<size_t>(K * L * d));  // [d_out, d_in]; the constructor leaves it empty
  faiss::float_randn(lt.A.data(), lt.A.size(), seed);
  lt.is_trained = true;
  const int64_t cols = K * L, block = 2048, buckets = int64_t{1} << K;
  std::vector<float> prod(static_cast<size_t>(block * cols));
  std::vector<uint32_t> codes(static_cast<size_t>(n * L));
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t nn = std::min(block, n - i0);
    lt.apply_noalloc(nn, x.data() + i0 * d, prod.data());
    for (int64_t i = 0; i < nn; ++i)
      for (int64_t t = 0; t < L; ++t) {
        uint32_t c = 0;
        const float* p = prod.data() + i * cols + t * K;
        for (int64_t b = 0; b < K; ++b) c |= static_cast<uint32_t>(p[b] > 0.f) << b;
        codes[(i0 + i) * L + t] = c;
      }
  }
  std::vector<uint32_t> offsets(static_cast<size_t>(L * (buckets + 1)), 0), ids(static_cast<size_t>(L * n));
  for (int64_t t = 0; t < L; ++t) {
    uint32_t* off = offsets.data() + t * (buckets + 1);
    for (int64_t i = 0; i < n; ++i) ++off[codes[i * L + t] + 1];
    for (int64_t b = 0; b < buckets; ++b) off[b + 1] += off[b];
    std::vector<uint32_t> pos(off, off + buckets);
    for (int64_t i = 0; i < n; ++i) ids[t * n + pos[codes[i * L + t]]++] = static_cast<uint32_t>(i);
  }
  return ids[static_cast<size_t>(n / 2)] + offsets[static_cast<size_t>(buckets / 2)];
}

// Queries/s of one part (0, 0) through SelectorSet, sampling with inclusion probabilities.
void query_throughput(const ArtifactReader& art, DumpReader& d, int64_t nq) {
  const auto& dg = d.info().geo;
  IndexedRows rows = IndexedRows::of(art);
  const int64_t E = rows.coverage_end, dim = dg.head_dim;
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
}
}  // namespace

int main(int argc, char** argv) {
  bench::BuildBenchArgs args;
  args.layers = "0-3";
  int64_t nq = 2000;
  if (!bench::parse_build_bench_args(
          argc, argv, "kvtool_bench_lsh [--dump PATH] [--threads N] [--layers A-B] [--queries N] [--rounds N]", args,
          {{"--queries", &nq}}))
    return 2;
  const std::string bin_dir = KVTOOL_BENCH_BIN_DIR, layers = args.layers;
  std::string dump = args.dump;
  const int threads = args.threads, n_rounds = args.rounds;
  if (dump.empty()) dump = bench::ensure_dump();
  const std::string out = bench::bench_dir() + "/bench.lsh.kvi";
  double rss_mib = 0;
  auto kvtool_side = [&] {
    return bench::run_child_ok({bin_dir + "/kvtool-lsh", "build", dump, "-o", out, "--force", "--threads",
                                std::to_string(threads), "--layers", layers, "--quiet"},
                               &rss_mib);
  };
  DumpReader d(dump);
  const auto& dg = d.info().geo;
  int64_t lf, ll;
  cli::parse_layers(layers, lf, ll);
  // kvtool-lsh's defaults: sink 4 and local 64 rows are not indexed.
  const int64_t rb = 4, re = d.info().committed_frontier - 64, nrows = re - rb, fparts = (ll - lf + 1) * dg.kv_heads;
  std::atomic<uint64_t> checksum{0};
  auto faiss_side = [&] {
    return bench::timed_parts(threads, fparts, static_cast<size_t>(nrows * dg.head_dim),
                              [&](int64_t p, std::vector<float>& x) {
                                d.read_k(lf + p / dg.kv_heads, p % dg.kv_heads, rb, re, x.data());
                                checksum += faiss_lsh_part(x, nrows, dg.head_dim, 10, 150, p);
                              });
  };
  bench::warm_page_cache(dump);
  bench::Samples sk, sf;
  bench::interleave(n_rounds, kvtool_side, faiss_side, sk, sf);
  ArtifactReader art(out);
  json ks = inspect_artifact(out).kind_summary.value();  // lsh artifacts have a kind summary
  IndexedRows rows = IndexedRows::of(art);
  const int64_t parts = static_cast<int64_t>(art.manifest()["kind_data"]["parts"].size()), L = 150;
  double rows_tables = static_cast<double>(rows.count()) * L * parts;
  if (rows.count() != nrows || parts != fparts) {
    std::printf("FAIL: the baseline indexed %lld rows of %lld parts, kvtool-lsh %lld of %lld\n", (long long)nrows,
                (long long)fparts, (long long)rows.count(), (long long)parts);
    return 1;
  }
  std::printf("lsh build (K=10, L=150, layers %s, %lld parts, %d threads; checksum %llu):\n", layers.c_str(),
              (long long)parts, threads, (unsigned long long)checksum.load());
  const double ratio =
      bench::report("kvtool-lsh build", sk, "faiss LinearTransform + CSR", sf, rows_tables, "rows*tables/s");
  std::printf("ratio kvtool/faiss = %.3f (target >= 0.9); peak RSS of kvtool-lsh %.0f MiB (target < 1 GiB)\n", ratio,
              rss_mib);
  std::printf(
      "table bytes: %.1f MiB raw, %.1f MiB stored (zstd); artifact %.1f MiB; empty buckets %.3f, max bucket %lld\n",
      ks["table_bytes_raw"].get<double>() / 1048576, ks["table_bytes_stored"].get<double>() / 1048576,
      static_cast<double>(art.file_size()) / 1048576, ks["bucket_empty_fraction_mean"].get<double>(),
      (long long)ks["bucket_max"].get<int64_t>());

  query_throughput(art, d, nq);
  std::remove(out.c_str());
  return ratio >= 0.9 && rss_mib < 1024 ? 0 : 1;
}
