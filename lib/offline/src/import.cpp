// `kvtool import` (kvtool/import.h, man/kvtool-import.1): a snapshot (kvtool/snapshot.h) into a
// kvdump v1 file one layer at a time. Whatever the reader, the dump's identity comes from one rule
// (--meta over what the source knows) and every value from one check (finite, and within the range
// of the dump's dtype), so that a format cannot regress on its own.
#include "kvtool/import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "kvtool/error.h"

namespace kvtool {

namespace {

// Every value of rows [0, rows) of a [H][T][d] block is finite and fits the dump's dtype.
void check_values(const std::vector<float>& x, int64_t H, int64_t T, int64_t d, int64_t rows, DType dt,
                  const std::string& what, int64_t layer) {
  // The smallest magnitudes that round to Inf: half an ulp above the largest finite value
  // (float16 65504; bfloat16 0x7F7F, whose halfway point 0x7F7F8000 rounds to the even 0x7F80).
  const uint32_t bf16_halfway = 0x7F7F8000u;
  float bf16_limit;
  std::memcpy(&bf16_limit, &bf16_halfway, sizeof bf16_limit);
  const float limit = dt == DType::f16    ? 65520.f
                      : dt == DType::bf16 ? bf16_limit
                                          : std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t i = 0; i < d; ++i) {
        const float v = x[static_cast<size_t>((h * T + t) * d + i)];
        KVT_CHECK(std::isfinite(v), NON_FINITE,
                  what << " has NaN/Inf at layer " << layer << ", head " << h << ", row " << t);
        KVT_CHECK(std::fabs(v) < limit, NON_FINITE,
                  what << " value " << v << " at layer " << layer << ", head " << h << ", row " << t << " does not fit "
                       << (dt == DType::f16 ? "float16" : "bfloat16") << "; import with dtype f32");
      }
}

std::string representation_for(DType t) {
  return std::string("full-kv-") + (t == DType::f32 ? "fp32" : t == DType::f16 ? "fp16" : "bf16") + "-post-rope-v1";
}

// The dump's identity from the --meta JSON (formats/kvdump-v1.md, "Root attributes"): every key
// optional except model_artifact_sha256 and rope_config, which no default could make true.
DumpSpec spec_from_meta(const json& m, const DumpGeometry& geo, int64_t q_heads) {
  KVT_CHECK(m.is_object(), BAD_ATTRIBUTE, "the meta JSON is not an object");
  static const std::set<std::string> known = {"model_artifact_sha256", "checkpoint_generation",
                                              "adapter_set_sha256",    "position_contract",
                                              "rope_config",           "tenant_namespace",
                                              "namespace_generation",  "request_generation",
                                              "cache_generation",      "publication_generation",
                                              "committed_frontier",    "q_to_kv_head",
                                              "representation",        "generator"};
  for (const auto& [k, v] : m.items())
    KVT_CHECK(known.count(k), BAD_ATTRIBUTE, "meta has an unknown key '" << k << "'");
  auto str = [&](const char* k, const std::string& def) {
    if (!m.contains(k)) return def;
    KVT_CHECK(m[k].is_string(), BAD_ATTRIBUTE, "meta " << k << " is not a string");
    return m[k].get<std::string>();
  };
  auto num = [&](const char* k, int64_t def) {
    if (!m.contains(k)) return def;
    KVT_CHECK(m[k].is_number_integer(), BAD_ATTRIBUTE, "meta " << k << " is not an integer");
    // JSON integers above int64 arrive unsigned; get<int64_t> would wrap 2^64-1 to -1.
    KVT_CHECK(!m[k].is_number_unsigned() ||
                  m[k].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
              BAD_ATTRIBUTE, "meta " << k << " is " << m[k].dump() << ", beyond the int64 range");
    return m[k].get<int64_t>();
  };
  for (const char* k : {"model_artifact_sha256", "rope_config"})
    KVT_CHECK(m.contains(k), MISSING_ATTRIBUTE,
              "meta has no " << k << " (required: the SHA-256 of the model checkpoint and its RoPE as a JSON object)");
  DumpSpec s;
  s.geo = geo;
  s.id.model_artifact_sha256 = str("model_artifact_sha256", "");
  s.id.checkpoint_generation = num("checkpoint_generation", 0);
  s.id.adapter_set_sha256 = str("adapter_set_sha256", empty_adapter_set_digest());
  s.id.position_contract = str("position_contract", "post-rope-absolute-v1");
  s.id.rope_config = m["rope_config"].is_object() ? canonical_json(m["rope_config"]) : str("rope_config", "");
  s.id.tenant_namespace = str("tenant_namespace", "default");
  s.id.namespace_generation = num("namespace_generation", 0);
  s.id.request_generation = num("request_generation", 0);
  s.id.cache_generation = num("cache_generation", 0);
  s.id.publication_generation = num("publication_generation", 0);
  s.committed_frontier = num("committed_frontier", geo.tokens);
  s.id.representation = str("representation", representation_for(geo.dtype));
  s.generator = str("generator", "kvtool import");
  if (m.contains("q_to_kv_head")) {
    KVT_CHECK(m["q_to_kv_head"].is_array() && m["q_to_kv_head"].size() <= static_cast<size_t>(kMaxDumpHeads),
              BAD_HEAD_MAP, "meta q_to_kv_head is not an array of at most 4096 heads");
    for (const auto& h : m["q_to_kv_head"]) {
      KVT_CHECK(h.is_number_integer() && h.get<int64_t>() >= 0 && h.get<int64_t>() < geo.kv_heads, BAD_HEAD_MAP,
                "meta q_to_kv_head has an entry outside [0, " << geo.kv_heads << ")");
      s.id.q_to_kv_head.push_back(h.get<int32_t>());
    }
  } else {
    const int64_t hq = q_heads > 0 ? q_heads : geo.kv_heads;
    KVT_CHECK(hq % geo.kv_heads == 0, BAD_HEAD_MAP,
              hq << " query heads are not a multiple of " << geo.kv_heads << " KV heads; give meta q_to_kv_head");
    for (int64_t h = 0; h < hq; ++h) s.id.q_to_kv_head.push_back(static_cast<int32_t>(h / (hq / geo.kv_heads)));
  }
  s.geo.q_heads = static_cast<int64_t>(s.id.q_to_kv_head.size());
  KVT_CHECK(q_heads <= 0 || q_heads == s.geo.q_heads, BAD_HEAD_MAP,
            "meta q_to_kv_head has " << s.geo.q_heads << " entries; the query tensors have " << q_heads << " heads");
  return s;
}

// The integer side tensors agree with the dump's rules (formats/kvdump-v1.md): query rows inside
// [0, T), int32 token ids, strictly increasing positions.
void check_side_tensors(const SnapshotInfo& s) {
  for (int64_t x : s.q_rows)
    KVT_CHECK(x >= 0 && x < s.geo.tokens, BAD_ATTRIBUTE,
              "q_positions has " << x << ", outside [0, " << s.geo.tokens << ")");
  for (size_t i = 0; i < s.tokens.size(); ++i)  // the dump stores int32 ids (formats/kvdump-v1.md)
    KVT_CHECK(s.tokens[i] >= std::numeric_limits<int32_t>::min() && s.tokens[i] <= std::numeric_limits<int32_t>::max(),
              BAD_ATTRIBUTE,
              "tokens has " << s.tokens[i] << " at row " << i << ", outside the int32 range of token ids");
  for (size_t i = 1; i < s.positions.size(); ++i)
    KVT_CHECK(s.positions[i] > s.positions[i - 1], BAD_ATTRIBUTE, "positions is not strictly increasing at row " << i);
}

DumpSpec spec_for(const KvSnapshot& snap, const ImportOptions& o) {
  const SnapshotInfo& s = snap.info();
  KVT_CHECK(o.meta.is_object(), BAD_ATTRIBUTE, "the meta JSON is not an object");
  json meta = o.meta;
  snap.complete_meta(meta);
  DumpGeometry geo = s.geo;
  if (o.dtype) geo.dtype = *o.dtype;
  DumpSpec spec = spec_from_meta(meta, geo, s.q_heads);
  if (!s.dequantized_from.empty() && !meta.contains("representation"))  // not a full-precision cache: say so
    spec.id.representation = s.dequantized_from + "-dequantized-kv-" + dtype_name(geo.dtype) + "-post-rope-v1";
  check_dump_identity(spec.id, spec.geo, spec.committed_frontier);
  return spec;
}

void write_layers(KvSnapshot& snap, const DumpSpec& spec, DumpWriter& w) {
  const DumpGeometry& g = spec.geo;
  const bool has_q = snap.info().geo.q_tokens > 0;
  std::vector<float> k, v;
  const auto slice = static_cast<size_t>(g.tokens * g.head_dim);
  for (int64_t l = 0; l < g.layers; ++l) {
    snap.read_kv(l, k, v);
    check_values(k, g.kv_heads, g.tokens, g.head_dim, spec.committed_frontier, g.dtype, snap.label('K', l), l);
    check_values(v, g.kv_heads, g.tokens, g.head_dim, spec.committed_frontier, g.dtype, snap.label('V', l), l);
    for (int64_t h = 0; h < g.kv_heads; ++h) w.write_kv(l, h, k.data() + h * slice, v.data() + h * slice);
    if (!has_q) continue;
    snap.read_q(l, k);
    check_values(k, g.q_heads, g.q_tokens, g.head_dim, g.q_tokens, g.dtype, snap.label('Q', l), l);
    for (int64_t h = 0; h < g.q_heads; ++h) w.write_q(l, h, k.data() + h * g.q_tokens * g.head_dim);
  }
}

}  // namespace

json ImportSummary::to_json() const {
  return json{{"layers", geo.layers},
              {"kv_heads", geo.kv_heads},
              {"q_heads", geo.q_heads},
              {"tokens", geo.tokens},
              {"head_dim", geo.head_dim},
              {"q_tokens", geo.q_tokens},
              {"dtype", dtype_name(geo.dtype)},
              {"committed_frontier", committed_frontier},
              {"source_format", source_format},
              {"source_dtype", source_dtype},
              {"has_q", has_q},
              {"has_tokens", has_tokens},
              {"has_positions", has_positions}};
}

DumpSpec dump_spec_from_meta(const json& meta, const DumpGeometry& geo, int64_t q_heads) {
  return spec_from_meta(meta, geo, q_heads);
}

ImportSummary import_snapshot(KvSnapshot& snap, const ImportOptions& o, const std::string& out) {
  const SnapshotInfo& s = snap.info();
  const DumpSpec spec = spec_for(snap, o);
  check_side_tensors(s);
  DumpWriter w(out, spec, o.overwrite);
  write_layers(snap, spec, w);
  if (s.geo.q_tokens > 0) w.write_q_positions(s.q_rows);
  // Positions before tokens: the order llama.cpp state imports always wrote them in (HDF5 keeps the
  // creation order, so the same dump is the same bytes).
  if (!s.positions.empty()) w.write_positions(s.positions);
  if (!s.tokens.empty()) w.write_tokens(s.tokens);
  w.commit();

  ImportSummary r;
  r.geo = spec.geo;
  r.committed_frontier = spec.committed_frontier;
  r.source_format = s.format;
  r.source_dtype = s.source_dtype;
  r.has_q = s.geo.q_tokens > 0;
  r.has_tokens = !s.tokens.empty();
  r.has_positions = !s.positions.empty();
  return r;
}

ImportSummary import_snapshot(const SnapshotRequest& request, const ImportOptions& o, const std::string& out) {
  const std::unique_ptr<KvSnapshot> snap = open_snapshot(request);
  return import_snapshot(*snap, o, out);
}

}  // namespace kvtool
