// The query arithmetic's SIMD level (kvtool/scoring.h: simd_supported, simd_level, set_simd_level)
// and the centroid dot products. The rest is by subject: scoring_pq.cpp (PQ scans), selection.cpp
// (top_k), simhash.cpp (SimHash), scoring_avx2.cpp / scoring_avx512.cpp (the SIMD kernels), and pq's
// row groups in lib/kinds/pq/pq_row_groups.cpp.
#include "kvtool/scoring.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kvtool/cpu_features.h"

namespace kvtool::scoring {

namespace {

// The cap set_simd_level puts on simd_supported() (tests compare the levels; benchmarks report each).
std::atomic<int> g_simd_cap{static_cast<int>(Simd::avx512)};

}  // namespace

Simd simd_supported() {
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx512f && cpu.avx512bw) return Simd::avx512;
  if (cpu.avx2) return Simd::avx2;
  return Simd::portable;
}

Simd simd_level() {
  return static_cast<Simd>(std::min(static_cast<int>(simd_supported()), g_simd_cap.load(std::memory_order_relaxed)));
}

Simd set_simd_level(Simd cap) {
  g_simd_cap.store(static_cast<int>(cap), std::memory_order_relaxed);
  return simd_level();
}

const char* simd_name(Simd s) {
  switch (s) {
    case Simd::avx512:
      return "avx512";
    case Simd::avx2:
      return "avx2";
    default:
      return "portable";
  }
}

void dot_scores(const float* q, const float* centroids, int64_t count, int64_t d, float* out) {
  for (int64_t c = 0; c < count; ++c) {
    float s = 0;
    for (int64_t t = 0; t < d; ++t) s += q[t] * centroids[c * d + t];
    out[c] = s;
  }
}

void dot_scores_f64(const float* q, const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                    double* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float* cen = centroids + (rows ? rows[i] : i) * d;
    double z = 0;
    for (int64_t t = 0; t < d; ++t) z += static_cast<double>(q[t]) * cen[t];
    out[i] = z * scale;
  }
}

}  // namespace kvtool::scoring
