// Shared pieces of the benchmarks: the synthetic 8 x 8 x 32768 x 128 fp16 dump, running a kvtool
// builder as a child process to time it and read its own peak RSS, and the comparison protocol every
// bench uses (interleaved, best of N): both sides run N rounds, alternating
// which goes first, after one untimed read of their common input so the page cache treats them
// alike; each side reports its min and median and the comparison is the ratio of the mins.
#pragma once
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <algorithm>
#include <functional>
#include <map>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <faiss/Clustering.h>

#include "kvtool/builder.h"
#include "env.h"  // tools/common: cli::default_threads
#include "kvtool/producers.h"

namespace kvtool::bench {

inline std::string bench_dir() {
  std::string d = "/tmp/kvtool-bench";
  std::system(("mkdir -p " + d).c_str());
  return d;
}

// The synthetic dump [layers, 8 kv heads, tokens, 128] fp16 (32 query heads, `query_count` queries
// of the last positions), written once into bench_dir() and reused by later runs.
inline std::string ensure_dump(int64_t tokens = 32768, int64_t layers = 8, int64_t query_count = 16) {
  std::string dump = bench_dir() + "/synth-" + std::to_string(layers) + "x8x" + std::to_string(tokens) + "x128-f16" +
                     (query_count == 16 ? "" : "-q" + std::to_string(query_count)) + ".h5";
  if (access(dump.c_str(), R_OK) != 0) {
    SynthOptions o;
    o.layers = layers;
    o.kv_heads = 8;
    o.q_heads = 32;
    o.head_dim = 128;
    o.tokens = tokens;
    o.seed = 1;
    o.dtype = DType::f16;
    o.query_count = query_count;
    auto t0 = std::chrono::steady_clock::now();
    synth_dump(o, {}, dump, true, false);
    std::printf("synthesized %s in %.1f s\n", dump.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return dump;
}

struct ChildRun {
  double seconds = 0, peak_rss_mib = 0;
  bool ok = false;
};

inline ChildRun run_child(std::vector<std::string> args) {
  ChildRun r;
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    // The child's stdout (a report the bench does not read) goes to /dev/null; stderr stays.
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    execv(av[0], av.data());
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_rss_mib = ru.ru_maxrss / 1024.0;
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

// The direct-FAISS baselines: fn(part, buffer) for every part on `threads` workers (one part per
// worker at a time, single-threaded BLAS, like kvtool's builders), `floats` floats of buffer each.
// Returns the wall time in seconds.
inline double timed_parts(int threads, int64_t parts, size_t floats,
                          const std::function<void(int64_t, std::vector<float>&)>& fn) {
  pin_blas_single_thread();
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      pin_blas_single_thread();
      std::vector<float> x(floats);
      for (int64_t p; (p = next++) < parts;) fn(p, x);
    });
  for (auto& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Scales every row of x [n, d] to unit L2 norm (what kvtool does before cosine k-means).
inline void normalize_rows(float* x, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += double(x[i * d + j]) * x[i * d + j];
    float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (int64_t j = 0; j < d; ++j) x[i * d + j] *= inv;
  }
}

// FAISS spherical k-means settings the benchmarks compare against: fixed iterations, no
// subsampling, every cluster allowed down to one point.
inline faiss::ClusteringParameters spherical_kmeans_params(int64_t iters, int64_t seed) {
  faiss::ClusteringParameters cp;
  cp.niter = static_cast<int>(iters);
  cp.spherical = true;
  cp.seed = static_cast<int>(seed);
  cp.max_points_per_centroid = 1 << 30;
  cp.min_points_per_centroid = 1;
  return cp;
}

// Timings of one side of a comparison, in seconds.
struct Samples {
  std::vector<double> s;
  double min() const { return *std::min_element(s.begin(), s.end()); }
  double median() const {
    std::vector<double> v = s;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
};

// Rounds per side: `dflt`, or KVTOOL_BENCH_ROUNDS, never fewer than 3 (a min of fewer runs says
// little on a shared machine).
inline int rounds(int dflt) {
  const char* e = std::getenv("KVTOOL_BENCH_ROUNDS");
  return std::max(3, e ? std::atoi(e) : dflt);
}

// The options of the build benches: --dump PATH, --threads N, --layers A-B, --rounds N, and a
// bench's own integer options (`extra`: name -> where it goes). Prints `usage` and returns false on
// anything else.
struct BuildBenchArgs {
  std::string dump, layers;
  int threads = 0, rounds = 3;
};
inline bool parse_build_bench_args(int argc, char** argv, const char* usage, BuildBenchArgs& a,
                                   const std::map<std::string, int64_t*>& extra = {}) {
  a.threads = cli::default_threads();
  a.rounds = rounds(3);
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    const bool has_value = i + 1 < argc;
    if (opt == "--dump" && has_value)
      a.dump = argv[++i];
    else if (opt == "--threads" && has_value)
      a.threads = std::atoi(argv[++i]);
    else if (opt == "--layers" && has_value)
      a.layers = argv[++i];
    else if (opt == "--rounds" && has_value)
      a.rounds = std::max(3, std::atoi(argv[++i]));
    else if (extra.count(opt) && has_value)
      *extra.at(opt) = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s\n", usage);
      return false;
    }
  }
  return true;
}

inline int64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// Reads a file once, untimed, so that both sides find it in the page cache.
inline void warm_page_cache(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  std::vector<char> buf(size_t{1} << 20);
  while (read(fd, buf.data(), buf.size()) > 0) {}
  close(fd);
}

// Runs `a` and `b` for `n` rounds each, interleaved: a first in even rounds, b first in odd ones,
// so neither side always runs on the cache (or thermal) state the other left. Each function
// returns the seconds it measured (so a side can exclude its own setup).
inline void interleave(int n, const std::function<double()>& a, const std::function<double()>& b, Samples& sa,
                       Samples& sb) {
  for (int r = 0; r < n; ++r) {
    if (r % 2 == 0) {
      sa.s.push_back(a());
      sb.s.push_back(b());
    } else {
      sb.s.push_back(b());
      sa.s.push_back(a());
    }
  }
}

// Prints both sides (min, median, and the work per second at the min when `work` > 0) and returns
// the ratio of the mins b/a: a's throughput relative to b's (> 1: a is faster).
inline double report(const char* name_a, const Samples& a, const char* name_b, const Samples& b, double work = 0,
                     const char* unit = "") {
  for (auto [name, s] : {std::pair{name_a, &a}, std::pair{name_b, &b}}) {
    std::printf("  %-34s min %10.3f ms  median %10.3f ms  (%zu runs)", name, s->min() * 1e3, s->median() * 1e3,
                s->s.size());
    if (work > 0) std::printf("  %12.4g %s at the min", work / s->min(), unit);
    std::printf("\n");
  }
  const double ratio = b.min() / a.min();
  std::printf("  ratio of mins (%s throughput / %s throughput) = %.3f\n", name_a, name_b, ratio);
  return ratio;
}

// Times a child process that must succeed (a failed run aborts the bench: a failed build is no
// timing).
inline double run_child_ok(const std::vector<std::string>& args, double* peak_rss_mib = nullptr) {
  ChildRun r = run_child(args);
  if (!r.ok) {
    std::fprintf(stderr, "bench: %s failed\n", args[0].c_str());
    std::exit(1);
  }
  if (peak_rss_mib) *peak_rss_mib = std::max(*peak_rss_mib, r.peak_rss_mib);
  return r.seconds;
}

}  // namespace kvtool::bench
