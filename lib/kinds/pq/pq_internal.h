// Internals of kind "pq" shared by its runtime (pq_select.cpp) and offline (pq_build.cpp) halves.
// Section layout: formats/kinds-v1.md, "pq".
#pragma once
#include <cstdint>
#include <string>

#include "common/stored_floats.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"

namespace kvtool::pq {

inline std::string code_dtype(int64_t bits) { return bits <= 8 ? "u8" : "u16"; }

struct PqLayout {
  int64_t m, bits, k, d, dsub;
  std::string codebook_dtype;  // "f32" or "f16" (params.codebook_dtype, absent: f32)
  static PqLayout of(const ArtifactReader& r) {
    const json& p = r.manifest()["params"];
    KVT_CHECK(p.contains("subspaces") && p["subspaces"].is_number_unsigned() && p.contains("bits") &&
                  p["bits"].is_number_unsigned(),
              BAD_MANIFEST, "pq params need subspaces and bits");
    PqLayout l;
    l.m = p["subspaces"];
    l.bits = p["bits"];
    l.d = r.source().geo.head_dim;
    KVT_CHECK(l.m >= 1 && l.d % l.m == 0 && l.bits >= 1 && l.bits <= 16, BAD_MANIFEST,
              "pq params subspaces=" << l.m << ", bits=" << l.bits << " do not fit head dim " << l.d);
    l.k = int64_t{1} << l.bits;
    l.dsub = l.d / l.m;
    l.codebook_dtype = stored_float_dtype(p, "codebook_dtype");
    return l;
  }
};

}  // namespace kvtool::pq
