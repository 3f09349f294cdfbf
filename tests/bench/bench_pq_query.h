// Pieces of the PQ query benchmarks (bench_query.cpp, bench_fastscan.cpp): the shape of the
// synthetic dump they query (1 layer x 8 kv heads x 32,768 rows x d 128, 32 query heads), building
// an artifact of it once, faiss::IndexPQ over an artifact's codebooks and codes, random queries,
// and the per-round interleaving and reporting of bench_common.h's protocol at p50 / p99.
#pragma once
#include <faiss/IndexPQ.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_set>

#include "bench_common.h"
#include "kvtool/artifact.h"
#include "kvtool/half.h"
#include "kvtool/pool.h"

namespace kvtool::bench {

using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 32768, kD = 128, kKv = 8, kQHeads = 32;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

inline std::string artifact(const std::string& dump, const std::string& name, const KindBuilder& b) {
  const std::string out = bench::bench_dir() + "/query-" + name + ".kvi";
  if (access(out.c_str(), R_OK) != 0) {
    BuildOptions o;
    o.output = out;
    o.sink = 0;
    o.local = 0;
    o.quiet = true;
    o.threads = 2;
    auto t0 = Clock::now();
    build_artifact(dump, o, b);
    std::printf("(built %s in %.1f s)\n", out.c_str(), since(t0));
  }
  return out;
}

// faiss::IndexPQ (inner product) over kv head h's codebooks and codes, packed FAISS's way.
inline std::unique_ptr<faiss::IndexPQ> faiss_pq(const ArtifactReader& r, int64_t h, int64_t m, int64_t bits) {
  auto idx = std::make_unique<faiss::IndexPQ>(kD, m, bits, faiss::METRIC_INNER_PRODUCT);
  auto c = r.read_section(*r.find("pq_centroids", 0, h));
  auto k = r.read_section(*r.find("pq_codes", 0, h));
  const bool f16 = r.find("pq_centroids", 0, h)->dtype == "f16";
  if (f16 && c.size() * 2 == idx->pq.centroids.size() * sizeof(float)) {  // f16 codebooks, widened
    const std::vector<float> w = widen_f16_bytes(c);
    std::memcpy(idx->pq.centroids.data(), w.data(), w.size() * sizeof(float));
  } else if (!f16 && c.size() == idx->pq.centroids.size() * sizeof(float)) {
    std::memcpy(idx->pq.centroids.data(), c.data(), c.size());
  } else {
    std::fprintf(stderr, "faiss_pq: codebooks of %zu bytes, FAISS needs %zu\n", c.size(),
                 idx->pq.centroids.size() * sizeof(float));
    std::exit(1);
  }
  const int64_t n = static_cast<int64_t>(k.size()) / m / (bits <= 8 ? 1 : 2);
  idx->codes.assign(static_cast<size_t>(n * idx->pq.code_size), 0);
  for (int64_t i = 0; i < n; ++i) {
    faiss::PQEncoderGeneric enc(idx->codes.data() + i * idx->pq.code_size, static_cast<int>(bits));
    for (int64_t j = 0; j < m; ++j)
      enc.encode(bits <= 8 ? k[i * m + j] : k[2 * (i * m + j)] | k[2 * (i * m + j) + 1] << 8);
  }
  idx->ntotal = n;
  idx->is_trained = true;
  return idx;
}

struct Queries {
  std::vector<float> q;  // [32 heads, d]
  std::vector<int64_t> heads, positions;
  explicit Queries(uint64_t seed, int64_t rows = kRows) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> nd;
    q.resize(kQHeads * kD);
    for (auto& x : q) x = nd(rng);
    for (int64_t h = 0; h < kQHeads; ++h) {
      heads.push_back(h);
      positions.push_back(rows);
    }
  }
};

// The answer buffers of one 32-head batch.
struct Answers {
  std::vector<int64_t> ids, counts;
  std::vector<float> scores;
  explicit Answers(int64_t cap) : ids(kQHeads * cap), counts(kQHeads), scores(ids.size()) {}
  BatchAnswers view(int64_t cap) { return {cap, ids.data(), counts.data(), scores.data(), nullptr}; }
};

struct Side {
  const char* name;
  Samples t;
};

// One round of each side, alternating which runs first (bench_common.h's protocol, per round).
inline void pair_round(int i, const std::function<double()>& ours, const std::function<double()>& theirs, Side& a,
                       Side& b) {
  if (i % 2) {
    b.t.s.push_back(theirs());
    a.t.s.push_back(ours());
  } else {
    a.t.s.push_back(ours());
    b.t.s.push_back(theirs());
  }
}

inline void print_pair(const char* what, const Side& a, const Side& b) {
  std::printf("  %-44s p50 %8.1f us  p99 %8.1f us\n", a.name, pct(a.t.s, 0.5) * 1e6, pct(a.t.s, 0.99) * 1e6);
  std::printf("  %-44s p50 %8.1f us  p99 %8.1f us\n", b.name, pct(b.t.s, 0.5) * 1e6, pct(b.t.s, 0.99) * 1e6);
  std::printf("  %s: %s is %.2fx %s at p50\n", what, a.name, pct(b.t.s, 0.5) / pct(a.t.s, 0.5), b.name);
}

// Fraction of FAISS's ids that kvtool's answer holds (ties at the cut may differ).
inline double agreement(const int64_t* ours, int64_t n, const faiss::Index::idx_t* theirs, int64_t k) {
  std::unordered_set<int64_t> got(ours, ours + n);
  int64_t same = 0;
  for (int64_t i = 0; i < k; ++i) same += got.count(theirs[i]);
  return k ? static_cast<double>(same) / static_cast<double>(k) : 1.0;
}

}  // namespace kvtool::bench
