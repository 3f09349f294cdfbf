// Internals of kind "lsh" shared by its runtime (lsh_select.cpp) and offline (lsh_build.cpp) halves.
// Section layout: formats/kinds-v1.md, "lsh".
#pragma once
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

struct LshLayout {
  int64_t bits, tables, d, buckets;
  static LshLayout of(const ArtifactReader& r) {
    const json& p = r.manifest()["params"];
    KVT_CHECK(p.contains("bits") && p["bits"].is_number_unsigned() && p.contains("tables") &&
                  p["tables"].is_number_unsigned(),
              BAD_MANIFEST, "lsh params need bits and tables");
    LshLayout l{p["bits"], p["tables"], r.source().geo.head_dim, 0};
    KVT_CHECK(l.bits >= 1 && l.bits <= 16 && l.tables >= 1 && l.tables <= 4096, BAD_MANIFEST,
              "lsh bits/tables out of range");
    l.buckets = int64_t{1} << l.bits;
    return l;
  }
};

inline std::string id_dtype(int64_t coverage_end) { return coverage_end <= 65536 ? "u16" : "u32"; }

}  // namespace lsh
}  // namespace kvtool
