// Shared pieces of the benchmarks: the synthetic 8 x 8 x 32768 x 128 fp16 dump and running a kvtool
// builder as a child process to time it and read its own peak RSS.
#pragma once
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <faiss/Clustering.h>

#include "kvtool/builder.h"
#include "kvtool/producers.h"

namespace kvtool::bench {

inline std::string bench_dir() {
  std::string d = "/tmp/kvtool-bench";
  std::system(("mkdir -p " + d).c_str());
  return d;
}

inline std::string ensure_dump(int64_t tokens = 32768) {
  std::string dump = bench_dir() + "/synth-8x8x" + std::to_string(tokens) + "x128-f16.h5";
  if (access(dump.c_str(), R_OK) != 0) {
    SynthOptions o;
    o.layers = 8;
    o.kv_heads = 8;
    o.q_heads = 32;
    o.head_dim = 128;
    o.tokens = tokens;
    o.seed = 1;
    o.dtype = DType::f16;
    o.query_count = 16;
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

}  // namespace kvtool::bench
