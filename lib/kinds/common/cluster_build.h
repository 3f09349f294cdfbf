// Building the clusters of one part (offline layer; shared by clusterkv and squeeze): cosine
// k-means (flat or tree, common/kmeans.h), stored centroid by rule, counting sort of members, and
// the part's sections.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "clusterkv/clusterkv_builder.h"
#include "common/cluster_set.h"
#include "common/kmeans.h"
#include "kvtool/builder.h"

namespace kvtool {

// Clusters rows [row0, row0 + n) (raw keys [n, d]) into k clusters by the k-means `km` and appends
// them. Returns the method used (automatic resolved by the cost model; flat when n = 0).
inline KmeansMethod add_clusters(ClusterSet& s, const float* raw, int64_t row0, int64_t n, int64_t k, int64_t iters,
                                 uint64_t seed, CentroidRule rule, const KmeansOptions& km) {
  const int64_t d = s.d;
  auto& members = s.members;
  auto& sizes = s.sizes;
  auto& prefix = s.prefix;
  auto& centroids = s.centroids;
  if (n <= 0) return KmeansMethod::flat;
  k = std::max<int64_t>(1, std::min(k, n));
  std::vector<int64_t> labels;
  std::vector<float> unit;
  const KmeansMethod method = resolve_kmeans(km, n, k, iters);
  kmeans(KmeansMetric::cosine, method, km, raw, n, d, k, iters, seed, labels, unit);
  std::vector<uint32_t> count(static_cast<size_t>(k), 0);
  for (int64_t l : labels) ++count[static_cast<size_t>(l)];
  // Update step of the last iteration: mean of the raw keys (raw-mean) or normalized mean of the
  // normalized keys (spherical) of each final cluster.
  std::vector<double> sum(static_cast<size_t>(k * d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double w = 1.0;
    if (rule == CentroidRule::spherical) {
      double nn = 0;
      for (int64_t t = 0; t < d; ++t) nn += static_cast<double>(raw[i * d + t]) * raw[i * d + t];
      w = nn > 0 ? 1.0 / std::sqrt(nn) : 0.0;
    }
    for (int64_t t = 0; t < d; ++t) sum[labels[i] * d + t] += w * raw[i * d + t];
  }
  if (rule == CentroidRule::spherical)
    for (int64_t c = 0; c < k; ++c) {
      double nn = 0;
      for (int64_t t = 0; t < d; ++t) nn += sum[c * d + t] * sum[c * d + t];
      double inv = nn > 0 ? 1.0 / std::sqrt(nn) : 0.0;
      for (int64_t t = 0; t < d; ++t) sum[c * d + t] *= inv * count[c];  // divided by count below
    }
  uint32_t base = members.empty() ? 0 : prefix.back();
  // Counting sort: members grouped by cluster, ascending row inside each cluster (stable).
  std::vector<uint32_t> start(static_cast<size_t>(k), 0);
  for (int64_t c = 1; c < k; ++c) start[c] = start[c - 1] + count[c - 1];
  std::vector<uint32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[start[labels[i]]++] = static_cast<uint32_t>(row0 + i);
  members.insert(members.end(), out.begin(), out.end());
  for (int64_t c = 0; c < k; ++c) {
    sizes.push_back(count[c]);
    base += count[c];
    prefix.push_back(base);
    for (int64_t t = 0; t < d; ++t) {
      // Empty clusters keep their unit centroid (valid, finite; they never yield rows).
      float v = count[c] == 0 ? unit[c * d + t] : static_cast<float>(sum[c * d + t] / count[c]);
      centroids.push_back(v);
    }
  }
  return method;
}

inline void cluster_sections(const ClusterSet& s, std::vector<PartSection>& out, const std::string& pre = "ckv",
                             const std::string& centroid_dtype = "f32") {
  const int64_t d = s.d;
  const auto& members = s.members;
  const auto& sizes = s.sizes;
  const auto& prefix = s.prefix;
  const auto& centroids = s.centroids;
  auto bytes = [](const void* p, size_t n) {
    std::vector<uint8_t> b(n);
    if (n) std::memcpy(b.data(), p, n);
    return b;
  };
  int64_t C = s.clusters(), n = static_cast<int64_t>(members.size());
  if (centroid_dtype == "i8") {
    I8Rows q = i8_rows_of(centroids, static_cast<size_t>(d), "a centroid");
    out.push_back({pre + "_centroids", "i8", {C, d}, std::move(q.codes)});
    out.push_back({i8_rows_exponent_section(pre + "_centroids"), "i8", {C}, std::move(q.exponents)});
  } else {
    out.push_back(
        {pre + "_centroids", centroid_dtype, {C, d}, stored_float_bytes(centroids, centroid_dtype, "a centroid")});
  }
  out.push_back({pre + "_sizes", "u32", {C}, bytes(sizes.data(), sizes.size() * 4)});
  out.push_back({pre + "_prefix_sums", "u32", {C}, bytes(prefix.data(), prefix.size() * 4)});
  out.push_back({pre + "_members", "u32", {n}, bytes(members.data(), members.size() * 4)});
}

// Append: the old clusters' stored centroid bytes (and i8 exponents) kept as the old artifact has
// them, the new clusters' after them. The builder's rows re-store to the same bytes, but a valid
// i8 row it would not write (a code of -128, another exponent for the same values) might not.
inline void keep_old_centroid_bytes(const ArtifactReader& old, int64_t layer, int64_t head, const std::string& pre,
                                    std::vector<PartSection>& out) {
  const std::string names[] = {pre + "_centroids", i8_rows_exponent_section(pre + "_centroids")};
  for (PartSection& sec : out) {
    if (sec.name != names[0] && sec.name != names[1]) continue;
    const SectionEntry* e = old.find(sec.name, layer, head);
    KVT_CHECK(e && e->dtype == sec.dtype, INTERNAL, "the old part lacks its " << sec.name);
    const std::vector<uint8_t> b = old.read_section(*e);
    KVT_CHECK(b.size() <= sec.bytes.size(), INTERNAL, "the old " << sec.name << " is larger than the new one");
    std::copy(b.begin(), b.end(), sec.bytes.begin());
  }
}

}  // namespace kvtool
