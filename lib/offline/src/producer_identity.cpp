#include "impl/producer_identity.h"

#include "kvtool/error.h"

namespace kvtool::impl {

DumpIdentity base_identity(const IdentityOptions& o) {
  DumpIdentity id;
  id.tenant_namespace = o.tenant_namespace;
  id.checkpoint_generation = o.checkpoint_generation;
  id.namespace_generation = o.namespace_generation;
  id.request_generation = o.request_generation;
  id.cache_generation = o.cache_generation;
  id.publication_generation = o.publication_generation;
  id.adapter_set_sha256 = empty_adapter_set_digest();
  id.position_contract = "post-rope-absolute-v1";
  return id;
}

std::string representation_for(DType t) {
  return std::string("full-kv-") + (t == DType::f32 ? "fp32" : t == DType::f16 ? "fp16" : "bf16") + "-post-rope-v1";
}

void check_frontier(const IdentityOptions& o, int64_t T) {
  KVT_CHECK(o.frontier >= -1 && o.frontier <= T, USAGE, "frontier " << o.frontier << " is outside [0, " << T << "]");
}

void write_model_dump(const ModelRows& r, const IdentityOptions& ident, const std::string& model_sha256,
                      const std::string& rope_config, DType dtype, const std::string& generator,
                      const std::string& out_path, bool overwrite) {
  const int64_t L = r.layers, H = r.kv_heads, Hq = r.q_heads, T = r.tokens, d = r.head_dim;
  const bool queries = !r.q.empty();
  DumpSpec spec;
  spec.id = base_identity(ident);
  spec.id.model_artifact_sha256 = model_sha256;
  spec.id.rope_config = rope_config;
  spec.id.representation = representation_for(dtype);
  for (int64_t h = 0; h < Hq; ++h) spec.id.q_to_kv_head.push_back(static_cast<int32_t>(h / (Hq / H)));
  spec.geo.layers = L;
  spec.geo.kv_heads = H;
  spec.geo.tokens = T;
  spec.geo.head_dim = d;
  spec.geo.q_heads = Hq;
  spec.geo.q_tokens = queries ? T : 0;
  spec.geo.dtype = dtype;
  spec.committed_frontier = ident.frontier;
  spec.generator = generator;
  DumpWriter w(out_path, spec, overwrite);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      const size_t off = static_cast<size_t>((l * H + h) * T * d);
      w.write_kv(l, h, r.k.data() + off, r.v.data() + off);
    }
  if (queries) {
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < Hq; ++h) w.write_q(l, h, r.q.data() + static_cast<size_t>((l * Hq + h) * T * d));
    std::vector<int64_t> qp(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) qp[static_cast<size_t>(i)] = i;
    w.write_q_positions(qp);
  }
  w.write_tokens(r.token_ids);
  w.commit();
}

}  // namespace kvtool::impl
