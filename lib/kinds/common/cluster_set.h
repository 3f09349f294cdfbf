// Clusters of one part as stored (shared by clusterkv and squeeze; formats/kinds-v1.md): centroids,
// sizes, inclusive prefix sums, members grouped by cluster in ascending row order. Runtime layer:
// loading only; building them is common/cluster_build.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/scoring.h"
#include "common/stored_floats.h"

namespace kvtool {

// Clusters of one part, all generations concatenated: cluster c has sizes[c] members stored at
// members[prefix[c] - sizes[c], prefix[c]) in ascending row order.
struct ClusterSet {
  int64_t d = 0;
  std::vector<float> centroids;
  std::vector<uint32_t> sizes, prefix, members;
  int64_t clusters() const { return static_cast<int64_t>(sizes.size()); }
  ClusterView view() const { return {clusters(), d, centroids.data(), sizes.data(), prefix.data(), members.data()}; }
  int64_t resident_bytes() const {
    return vector_bytes(centroids) + vector_bytes(sizes) + vector_bytes(prefix) + vector_bytes(members);
  }

  template <typename T>
  static void copy_bytes(std::vector<T>& to, const std::vector<uint8_t>& from) {
    KVT_CHECK(from.size() == to.size() * sizeof(T), SHAPE_MISMATCH,
              "a cluster section's size disagrees with its shape");
    if (!from.empty()) std::memcpy(to.data(), from.data(), from.size());
  }

  // Whole clusters best first by `score` (one per cluster; ties to the lower cluster), the last one
  // cut, until `budget` rows: their members, each with its cluster's score. `order` is scratch.
  void take_best(const float* score, int64_t budget, std::vector<int64_t>& order, Selection& out) const {
    // Full ranking of every cluster (the reference's 256-slot kernel breaks beyond 256 clusters).
    order.resize(static_cast<size_t>(clusters()));
    scoring::top_k_into(score, clusters(), clusters(), order.data());
    int64_t taken = 0;
    for (int64_t c : order) {
      if (taken >= budget) break;
      const int64_t take = std::min<int64_t>(sizes[c], budget - taken);
      const uint32_t* m = members.data() + (prefix[c] - sizes[c]);
      for (int64_t i = 0; i < take; ++i) {
        out.ids.push_back(m[i]);
        out.scores.push_back(score[c]);
      }
      taken += take;
    }
  }

  // Centroids stored as `centroid_dtype` ("f32", "f16", or "i8" rows with their exponent section)
  // are held widened to f32.
  static ClusterSet load(const ArtifactReader& r, int64_t layer, int64_t head, int64_t d,
                         const std::string& pre = "ckv", const std::string& centroid_dtype = "f32") {
    ClusterSet s;
    s.d = d;
    auto get = [&](const char* suffix, const char* dtype) {
      std::string name = pre + suffix;
      const SectionEntry* e = r.find(name, layer, head);
      KVT_CHECK(e && e->dtype == dtype, PART_INVALID,
                "part (" << layer << ", " << head << ") lacks section " << name << " (" << dtype << ")");
      return std::make_pair(e, r.read_section(*e));
    };
    auto [ce, cb] = get("_centroids", centroid_dtype.c_str());
    auto [se, sb] = get("_sizes", "u32");
    auto [pe, pb] = get("_prefix_sums", "u32");
    auto [me, mb] = get("_members", "u32");
    // Ranks and element counts are checked before any copy: a section's byte size follows from
    // its shape (the reader checked raw_size = product(shape) * dtype size), so equal shapes mean
    // equal sizes.
    KVT_CHECK(se->shape.size() == 1 && me->shape.size() == 1, SHAPE_MISMATCH,
              "cluster sizes and members of part (" << layer << ", " << head << ") must be vectors");
    const int64_t C = se->shape[0];
    KVT_CHECK(ce->shape == std::vector<int64_t>({C, d}) && pe->shape == std::vector<int64_t>({C}), SHAPE_MISMATCH,
              "cluster sections of part (" << layer << ", " << head << ") have inconsistent shapes");
    s.sizes.resize(static_cast<size_t>(C));
    s.prefix.resize(static_cast<size_t>(C));
    s.members.resize(static_cast<size_t>(me->shape[0]));
    if (centroid_dtype == "i8") {
      auto [xe, xb] = get(i8_rows_exponent_section("_centroids").c_str(), "i8");
      KVT_CHECK(xe->shape == std::vector<int64_t>({C}), SHAPE_MISMATCH,
                "centroid exponents of part (" << layer << ", " << head << ") are not one per cluster");
      s.centroids = widen_i8_rows(cb.data(), xb.data(), static_cast<size_t>(C), static_cast<size_t>(d));
    } else {
      s.centroids = widen_float_section(cb, centroid_dtype);
    }
    copy_bytes(s.sizes, sb);
    copy_bytes(s.prefix, pb);
    copy_bytes(s.members, mb);
    return s;
  }
};

}  // namespace kvtool
