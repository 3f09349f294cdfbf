// `kvtool import --format` (kvtool/import_chunks.h): the plan of impl/chunk_formats.h written into
// a kvdump v1 file one layer at a time, with the --meta identity every import shares
// (dump_spec_from_meta) and the value checks of import_dump (finite; within float16 when the dump
// is f16).
#include "kvtool/import_chunks.h"

#include <cmath>
#include <limits>

#include "impl/chunk_formats.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

void check_finite(const std::vector<float>& x, int64_t H, int64_t T, int64_t d, DType dt, const char* what,
                  int64_t layer) {
  const float limit = dt == DType::f16 ? 65520.f : std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) {
        const float v = x[static_cast<size_t>((h * T + t) * d + i)];
        KVT_CHECK(std::isfinite(v), NON_FINITE,
                  what << " has NaN/Inf at layer " << layer << ", head " << h << ", row " << t);
        KVT_CHECK(std::fabs(v) < limit, NON_FINITE,
                  what << " value " << v << " at layer " << layer << ", head " << h << ", row " << t
                       << " does not fit float16; import with dtype f32 or bf16");
      }
}

DType dtype_of(const std::string& s) { return s == "f16" ? DType::f16 : s == "bf16" ? DType::bf16 : DType::f32; }

}  // namespace

ImportSummary import_chunks(const std::vector<std::string>& inputs, const ChunkImportOptions& o, const json& meta,
                            std::optional<DType> dtype, const std::string& out, bool overwrite) {
  const chunks::Plan p = chunks::plan_chunks(inputs, o);
  DumpGeometry geo;
  geo.layers = p.layers;
  geo.kv_heads = p.kv_heads;
  geo.tokens = p.tokens;
  geo.head_dim = p.head_dim;
  geo.dtype = dtype ? *dtype : dtype_of(p.source_dtype);
  const DumpSpec spec = dump_spec_from_meta(meta, geo, 0);
  check_dump_identity(spec.id, spec.geo, spec.committed_frontier);

  DumpWriter w(out, spec, overwrite);
  std::vector<float> k, v;
  const int64_t H = geo.kv_heads, T = geo.tokens, d = geo.head_dim;
  for (int64_t l = 0; l < geo.layers; ++l) {
    chunks::read_layer(p, l, k, v);
    check_finite(k, H, T, d, geo.dtype, "K", l);
    check_finite(v, H, T, d, geo.dtype, "V", l);
    const size_t slice = static_cast<size_t>(T * d);
    for (int64_t h = 0; h < H; ++h) w.write_kv(l, h, k.data() + h * slice, v.data() + h * slice);
  }
  w.commit();

  ImportSummary s;
  s.geo = spec.geo;
  s.committed_frontier = spec.committed_frontier;
  s.source_format = p.format + (p.memory_format.empty() ? "" : " " + p.memory_format);
  s.source_dtype = p.source_dtype;
  return s;
}

}  // namespace kvtool
