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

}  // namespace kvtool::impl
