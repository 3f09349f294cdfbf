#include "kvtool/identity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvtool/half.h"

#include "kvtool/canonical.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

enum Tag : uint16_t {
  kModel = 1,
  kCheckpoint = 2,
  kAdapter = 3,
  kPositionContract = 4,
  kRope = 5,
  kRepresentation = 6,
  kTenant = 7,
  kHeadMap = 8,
  kLayers = 9,
  kKvHeads = 10,
  kHeadDim = 11,
  kDtype = 12,
  kRangeEnd = 13,
  kPayload = 14,
  kNamespaceGen = 20,
  kRequestGen = 21,
  kCacheGen = 22,
  kPublicationGen = 23,
  kTokens = 24,
  kFrontier = 25,
  kContent = 26,
};

void identity_fields(CanonicalHasher& h, const DumpIdentity& id, const DumpGeometry& g) {
  h.str(kModel, id.model_artifact_sha256);
  h.i64(kCheckpoint, id.checkpoint_generation);
  h.str(kAdapter, id.adapter_set_sha256);
  h.str(kPositionContract, id.position_contract);
  h.str(kRope, canonical_rope_config(id.rope_config));
  h.str(kRepresentation, id.representation);
  h.str(kTenant, id.tenant_namespace);
  h.i32_array(kHeadMap, id.q_to_kv_head);
  h.u64(kLayers, static_cast<uint64_t>(g.layers));
  h.u64(kKvHeads, static_cast<uint64_t>(g.kv_heads));
  h.u64(kHeadDim, static_cast<uint64_t>(g.head_dim));
  h.str(kDtype, dtype_name(g.dtype));
}

std::string get_str(const json& j, const char* k) {
  KVT_CHECK(j.contains(k) && j[k].is_string(), BAD_MANIFEST,
            "source binding field '" << k << "' is missing or not a string");
  return j[k].get<std::string>();
}
int64_t get_int(const json& j, const char* k) {
  KVT_CHECK(j.contains(k) && j[k].is_number_integer(), BAD_MANIFEST,
            "source binding field '" << k << "' is missing or not an integer");
  return j[k].get<int64_t>();
}

}  // namespace

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::f32;
  if (s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  KVT_THROW(USAGE, "unknown dtype '" << s << "' (expected f32, f16 or bf16)");
}

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

std::string empty_adapter_set_digest() { return to_hex(sha256("kvtool.adapter-set.v1:[]")); }

std::string canonical_rope_config(const std::string& rope) {
  json j = parse_json(rope, Reason::BAD_ATTRIBUTE, "rope_config");
  KVT_CHECK(j.is_object(), BAD_ATTRIBUTE, "rope_config must be a JSON object");
  return canonical_json(j);
}

Digest content_digest(const DumpIdentity& id, const DumpGeometry& g, int64_t end, const Digest& payload) {
  CanonicalHasher h("kvtool.content.v1");
  identity_fields(h, id, g);
  h.u64(kRangeEnd, static_cast<uint64_t>(end));
  h.digest(kPayload, payload);
  return h.finish();
}

Digest snapshot_digest(const DumpIdentity& id, const DumpGeometry& g, int64_t frontier, const Digest& content) {
  CanonicalHasher h("kvtool.snapshot.v1");
  identity_fields(h, id, g);
  h.i64(kNamespaceGen, id.namespace_generation);
  h.i64(kRequestGen, id.request_generation);
  h.i64(kCacheGen, id.cache_generation);
  h.i64(kPublicationGen, id.publication_generation);
  h.u64(kTokens, static_cast<uint64_t>(g.tokens));
  h.u64(kFrontier, static_cast<uint64_t>(frontier));
  h.digest(kContent, content);
  return h.finish();
}

Digest prefix_tokens_digest(const std::vector<int64_t>& tokens, int64_t end) {
  CanonicalHasher h("kvtool.prefix-tokens.v1");
  h.u64(1, static_cast<uint64_t>(end));
  Sha256 ids;
  for (int64_t i = 0; i < end && i < static_cast<int64_t>(tokens.size()); ++i) {
    uint8_t le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(static_cast<uint64_t>(tokens[i]) >> (8 * b));
    ids.update(le, 8);
  }
  h.digest(2, ids.finish());
  return h.finish();
}

json SourceBinding::to_json() const {
  json j;
  j["model_artifact_sha256"] = id.model_artifact_sha256;
  j["checkpoint_generation"] = id.checkpoint_generation;
  j["adapter_set_sha256"] = id.adapter_set_sha256;
  j["position_contract"] = id.position_contract;
  j["rope_config"] = id.rope_config;
  j["tenant_namespace"] = id.tenant_namespace;
  j["namespace_generation"] = id.namespace_generation;
  j["request_generation"] = id.request_generation;
  j["cache_generation"] = id.cache_generation;
  j["publication_generation"] = id.publication_generation;
  j["q_to_kv_head"] = id.q_to_kv_head;
  j["representation"] = id.representation;
  j["layers"] = geo.layers;
  j["kv_heads"] = geo.kv_heads;
  j["q_heads"] = geo.q_heads;
  j["head_dim"] = geo.head_dim;
  j["tokens"] = geo.tokens;
  j["dtype"] = dtype_name(geo.dtype);
  j["committed_frontier"] = committed_frontier;
  j["coverage_end"] = coverage_end;
  j["payload_sha256"] = payload_sha256;
  j["content_digest"] = content_digest;
  j["snapshot_digest"] = snapshot_digest;
  j["prefix_tokens_sha256"] = prefix_tokens_sha256;
  return j;
}

SourceBinding SourceBinding::from_json(const json& j) {
  KVT_CHECK(j.is_object(), BAD_MANIFEST, "source binding is not an object");
  SourceBinding b;
  b.id.model_artifact_sha256 = get_str(j, "model_artifact_sha256");
  b.id.checkpoint_generation = get_int(j, "checkpoint_generation");
  b.id.adapter_set_sha256 = get_str(j, "adapter_set_sha256");
  b.id.position_contract = get_str(j, "position_contract");
  b.id.rope_config = get_str(j, "rope_config");
  b.id.tenant_namespace = get_str(j, "tenant_namespace");
  b.id.namespace_generation = get_int(j, "namespace_generation");
  b.id.request_generation = get_int(j, "request_generation");
  b.id.cache_generation = get_int(j, "cache_generation");
  b.id.publication_generation = get_int(j, "publication_generation");
  KVT_CHECK(j.contains("q_to_kv_head") && j["q_to_kv_head"].is_array(), BAD_MANIFEST, "q_to_kv_head missing");
  for (const auto& x : j["q_to_kv_head"]) {
    KVT_CHECK(x.is_number_integer(), BAD_MANIFEST, "q_to_kv_head entries must be integers");
    b.id.q_to_kv_head.push_back(x.get<int32_t>());
  }
  b.id.representation = get_str(j, "representation");
  b.geo.layers = get_int(j, "layers");
  b.geo.kv_heads = get_int(j, "kv_heads");
  b.geo.q_heads = get_int(j, "q_heads");
  b.geo.head_dim = get_int(j, "head_dim");
  b.geo.tokens = get_int(j, "tokens");
  try {
    b.geo.dtype = parse_dtype(get_str(j, "dtype"));
  } catch (const Error&) {
    KVT_THROW(BAD_MANIFEST, "source binding has an unknown dtype");
  }
  b.committed_frontier = get_int(j, "committed_frontier");
  b.coverage_end = get_int(j, "coverage_end");
  b.payload_sha256 = get_str(j, "payload_sha256");
  b.content_digest = get_str(j, "content_digest");
  b.snapshot_digest = get_str(j, "snapshot_digest");
  b.prefix_tokens_sha256 = get_str(j, "prefix_tokens_sha256");
  KVT_CHECK(b.geo.layers > 0 && b.geo.kv_heads > 0 && b.geo.head_dim > 0 && b.coverage_end >= 0 &&
                b.coverage_end <= b.committed_frontier && b.committed_frontier <= b.geo.tokens,
            BAD_MANIFEST, "source binding geometry or coverage is inconsistent");
  return b;
}

}  // namespace kvtool
