// Internals of kind "lsh" shared by its runtime (lsh_select.cpp) and offline (lsh_build.cpp) halves.
// Section layout: formats/kinds-v1.md, "lsh".
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/error.h"

namespace kvtool {

// The Gaussian projections [d, K·L] of one part: SplitMix64 normals from part_seed(seed, layer,
// kv head, stream 7), row-major; column t·K + b is bit b of table t.
std::vector<float> lsh_projections(uint64_t seed, int64_t layer, int64_t kv_head, int64_t d, int64_t bits,
                                   int64_t tables);

// u = P(Binomial(L, P) >= c) with P = p^K and p = 1 - arccos(cos)/pi. Exact closed form for
// c = 2, a log-space sum otherwise.
double lsh_inclusion_probability(double cosine, int64_t bits, int64_t tables, int64_t min_collisions);

namespace lsh {

constexpr uint64_t kProjectionStream = 7;

// Id layouts (formats/kinds-v1.md, "lsh"). Artifacts whose params carry `id_layout` =
// kIdLayoutSegments store, per segment of at most 2^16 rows aligned on absolute row multiples of
// 2^16, one CSR table per hash table with u16 ids relative to the segment base. Older artifacts
// (no `id_layout`) hold one CSR per table with absolute ids, u16 if E <= 65536 else u32: read as
// a single segment of base 0. With E <= 65536 both layouts are the same bytes.
constexpr int64_t kSegmentRows = 65536;
constexpr const char* kIdLayoutSegments = "u16-segments";

// The indexed rows [lo, hi) of one segment; a stored id is row - base.
struct Segment {
  int64_t base, lo, hi;
};

inline std::vector<Segment> segments_of(int64_t begin, int64_t end, bool segmented) {
  std::vector<Segment> s;
  if (!segmented) {
    if (end > begin) s.push_back({0, begin, end});
    return s;
  }
  for (int64_t lo = begin; lo < end;) {
    const int64_t base = lo / kSegmentRows * kSegmentRows, hi = std::min(end, base + kSegmentRows);
    s.push_back({base, lo, hi});
    lo = hi;
  }
  return s;
}

struct LshLayout {
  int64_t bits, tables, d, buckets;
  bool segmented;  // params.id_layout = kIdLayoutSegments
  static LshLayout of(const ArtifactReader& r) {
    const json& p = r.manifest()["params"];
    KVT_CHECK(p.contains("bits") && p["bits"].is_number_unsigned() && p.contains("tables") &&
                  p["tables"].is_number_unsigned(),
              BAD_MANIFEST, "lsh params need bits and tables");
    LshLayout l{p["bits"], p["tables"], r.source().geo.head_dim, 0, p.contains("id_layout")};
    KVT_CHECK(l.bits >= 1 && l.bits <= 16 && l.tables >= 1 && l.tables <= 4096, BAD_MANIFEST,
              "lsh bits/tables out of range");
    KVT_CHECK(!l.segmented || (p["id_layout"].is_string() && p["id_layout"] == kIdLayoutSegments), BAD_MANIFEST,
              "lsh params.id_layout is not \"" << kIdLayoutSegments << "\"");
    l.buckets = int64_t{1} << l.bits;
    return l;
  }
};

// The id dtype of an artifact: u16 in the segmented layout, else chosen by the coverage end E.
inline std::string id_dtype(int64_t coverage_end, bool segmented) {
  return segmented || coverage_end <= 65536 ? "u16" : "u32";
}

}  // namespace lsh
}  // namespace kvtool
